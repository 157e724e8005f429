//! vgpuctl's REST client over vgpud's unix socket, as a library: the command line uses it, and
//! so do programs that speak to many vgpuds at once (`examples/two-level`'s global scheduler).

pub mod client;
