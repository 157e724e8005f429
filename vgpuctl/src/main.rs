//! vgpuctl: the command-line client of vgpud's REST API.

fn main() {}
