//! Real-peer tests of the `placement` client (issue 16): OpenStack Placement from PyPI, started
//! by `testkit::placement` with SQLite and noauth2 and stopped by its PID.
