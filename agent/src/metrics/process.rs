//! The standard Prometheus process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`), read
//! from `/proc/self` as the Prometheus client libraries do.

use std::path::Path;

/// `USER_HZ`: the unit of the CPU times in `/proc/<pid>/stat`. The kernel fixes it at 100 for
/// every architecture's user-space interface (proc(5), "utime ... measured in clock ticks";
/// `USER_HZ` is 100 on all Linux ABIs, include/asm-generic/param.h).
const USER_HZ: f64 = 100.0;

/// What `/proc` says about this process; a field that cannot be read is `None` (its gauge is
/// left out).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub resident_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads this process's figures from `/proc`.
    pub fn current() -> Self {
        Self::read(Path::new("/proc"), "self")
    }

    /// Reads process `pid`'s figures under a procfs mounted at `proc`.
    pub fn read(proc: &Path, pid: &str) -> Self {
        let dir = proc.join(pid);
        let stat = std::fs::read_to_string(dir.join("stat")).ok();
        let fields = stat.as_deref().and_then(stat_fields);
        let boot = std::fs::read_to_string(proc.join("stat"))
            .ok()
            .and_then(|s| boot_time(&s));
        let tick = |i: usize| fields.as_ref()?.get(i)?.parse::<f64>().ok();
        Self {
            cpu_seconds: tick(11)
                .zip(tick(12))
                .map(|(user, system)| (user + system) / USER_HZ),
            resident_bytes: std::fs::read_to_string(dir.join("status"))
                .ok()
                .and_then(|s| vm_rss_bytes(&s)),
            open_fds: std::fs::read_dir(dir.join("fd"))
                .ok()
                .map(|d| d.count() as u64),
            start_time_seconds: tick(19)
                .zip(boot)
                .map(|(start, boot)| boot + start / USER_HZ),
        }
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses, so the split is at the last `)`): index 0 is the state (field 3 in proc(5)).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS:` of `/proc/<pid>/status`, in bytes.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    status_bytes(status, "VmRSS:")
}

/// This process's resident memory that no file backs (`RssAnon:` of `/proc/self/status`), in
/// bytes: what its own allocations cost, unlike `VmRSS`, which also counts the executable's
/// and the libraries' pages.
pub fn resident_anonymous_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_bytes(&status, "RssAnon:")
}

/// A memory field of `/proc/<pid>/status`, in bytes (the kernel writes kB).
fn status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    let kb: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_procfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("42/fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(p.join("42/fd").join(fd), "").unwrap();
        }
        // Command name with a space and a parenthesis; utime 250, stime 50, starttime 1000.
        std::fs::write(
            p.join("42/stat"),
            "42 (vgpud (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 1000 10",
        )
        .unwrap();
        std::fs::write(p.join("42/status"), "Name:\tvgpud\nVmRSS:\t  2048 kB\n").unwrap();
        std::fs::write(p.join("stat"), "cpu 1 2 3\nbtime 1700000000\n").unwrap();
        let s = ProcessStats::read(p, "42");
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.resident_bytes, Some(2 * 1024 * 1024));
        assert_eq!(s.open_fds, Some(3));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
    }

    #[test]
    fn this_process_is_readable() {
        let s = ProcessStats::current();
        assert!(s.resident_bytes.is_some_and(|b| b > 0));
        assert!(s.open_fds.is_some_and(|n| n >= 3));
        assert!(s.start_time_seconds.is_some_and(|t| t > 1.0e9));
    }
}
