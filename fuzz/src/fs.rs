//! [`FuzzFs`]: a [`Sysfs`] whose files, links and directories all come from the fuzz input.
//!
//! The input is cut at `\0` into chunks; a path reads the chunk its hash picks, so one input
//! describes a whole tree without the fuzzer having to know its shape. A link's target and a
//! directory's entries (one per line) are chunks too. Every path exists.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use sysfs::{Op, Sysfs, SysfsError};

/// The most directory entries one listing returns, so a big input cannot make discovery walk
/// millions of devices.
const MAX_ENTRIES: usize = 64;

/// A sysfs made of the fuzz input.
#[derive(Debug, Clone)]
pub struct FuzzFs {
    chunks: Vec<Vec<u8>>,
}

impl FuzzFs {
    /// A tree whose files are the `\0`-separated chunks of `data`.
    pub fn new(data: &[u8]) -> Self {
        Self {
            chunks: data.split(|b| *b == 0).map(<[u8]>::to_vec).collect(),
        }
    }

    /// The chunk a path (and what is done with it) picks.
    fn chunk(&self, op: Op, path: &Path) -> &[u8] {
        let mut h = DefaultHasher::new();
        (op as u8).hash(&mut h);
        path.hash(&mut h);
        let i = (h.finish() % self.chunks.len() as u64) as usize;
        &self.chunks[i]
    }
}

impl Sysfs for FuzzFs {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        sysfs::check_host_path(Op::Read, path)?;
        let data = self.chunk(Op::Read, path);
        // A chunk starting with `!` is an errno, so the readers' error paths run too.
        if let [b'!', n, ..] = data {
            return Err(SysfsError::errno_of(Op::Read, path, i32::from(*n % 134)));
        }
        if data.len() > limit {
            return Err(SysfsError::errno_of(Op::Read, path, libc_efbig()));
        }
        Ok(data.to_vec())
    }

    fn write(&self, path: &Path, _data: &[u8]) -> Result<(), SysfsError> {
        // The targets only read; a write would be a reader that mutates.
        panic!("a sysfs reader wrote {}", path.display());
    }

    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        sysfs::check_host_path(Op::ReadLink, path)?;
        let data = self.chunk(Op::ReadLink, path);
        if data.is_empty() {
            return Err(SysfsError::new(
                Op::ReadLink,
                path,
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        Ok(PathBuf::from(OsString::from_vec(data.to_vec())))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        sysfs::check_host_path(Op::ListDir, path)?;
        let data = self.chunk(Op::ListDir, path);
        Ok(data
            .split(|b| *b == b'\n')
            .filter(|n| !n.is_empty())
            .take(MAX_ENTRIES)
            .map(|n| OsString::from_vec(n.to_vec()))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        !self.chunk(Op::Read, path).starts_with(b"!")
    }
}

/// `EFBIG`, as the real implementation answers a file over the limit.
fn libc_efbig() -> i32 {
    27
}
