//! Crash torture of the vgpud daemon (issue 14): several clients drive a random mix of REST and
//! D-Bus operations against `vgpud run --sim`, a killer SIGKILLs the daemon at random moments and
//! restarts it, and at the end the clients' record of what was acknowledged is checked against
//! the daemon's answers, its store and the simulated host.
//!
//! - [`http`]: a blocking HTTP/1.1 client over the daemon's unix socket.
//! - [`daemon`]: starting, killing and restarting the daemon process.
//! - [`ledger`]: what each client sent and what was acknowledged.
//! - [`run`]: the clients, the killer and the invariants.

pub mod daemon;
pub mod http;
pub mod ledger;
pub mod run;

/// A small deterministic generator (xorshift64*): a seed reproduces a run's choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n.max(1)
    }
}
