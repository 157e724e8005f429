//! `vgpud-bench`: benchmarks as a program (work in progress).

fn main() {}
