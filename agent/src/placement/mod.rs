//! OpenStack Placement: what vgpud reports of its host, and how it checks the allocations the
//! upstream scheduler made there.

pub mod audit;
pub mod consumer;
