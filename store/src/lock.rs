//! The state directory's lock: an exclusive `flock` on the directory itself.
//!
//! A lock on a file inside the directory is only as good as the file's name: once someone
//! deletes `<dir>/lock`, the next instance creates a new inode and locks that, and two agents
//! share one state directory (issue 14, defect 5). The directory's inode cannot be swapped while
//! it holds the document, so its lock holds. `flock(2)` works on any open file descriptor,
//! directories included (a read-only `open` of a directory is allowed; see `open(2)`, O_DIRECTORY
//! is implied by `File::open` succeeding on one). `<dir>/lock` is still taken after it, so a
//! build from before this one, which knows only the file, is kept out too.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::StoreError;

const LOCK_FILE: &str = "lock";

/// Both locks, held while the value lives.
#[derive(Debug)]
pub(crate) struct DirLock {
    _dir: File,
    _file: File,
}

impl DirLock {
    /// Takes the directory's lock, then the lock file's; either held elsewhere is
    /// [`StoreError::Locked`].
    pub(crate) fn take(dir: &Path) -> Result<Self, StoreError> {
        let dir_file = File::open(dir).map_err(|e| StoreError::io("open", dir, e))?;
        if !dir_file
            .metadata()
            .map_err(|e| StoreError::io("stat", dir, e))?
            .is_dir()
        {
            return Err(StoreError::io(
                "lock",
                dir,
                std::io::Error::other("not a directory"),
            ));
        }
        try_lock(&dir_file, dir, dir)?;
        let path = dir.join(LOCK_FILE);
        let file = crate::modes::open_private(
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true),
            &path,
        )?;
        try_lock(&file, &path, dir)?;
        Ok(Self {
            _dir: dir_file,
            _file: file,
        })
    }
}

fn try_lock(file: &File, path: &Path, dir: &Path) -> Result<(), StoreError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.to_owned(),
        }),
        Err(TryLockError::Error(e)) => Err(StoreError::io("lock", path, e)),
    }
}
