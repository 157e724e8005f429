//! The parts of vgpud's benchmarks other programs reuse: the openb trace reader (the fleet
//! benchmark of `examples/two-level` draws its workload from the same pod list).

pub mod openb;
