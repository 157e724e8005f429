//! A behavioural simulated GPU host behind the same traits as the real kernel and vendor libraries.
