//! Crash-safe state files for vgpud's desired state.
//!
//! A [`Store`] is one directory (default `/var/lib/vgpud`) holding one JSON document of the
//! caller's type, guarded by an exclusive lock on `<dir>/lock` so a second agent instance is kept
//! out. Every change is written whole: to a temporary file, fsynced, renamed over the document,
//! then the directory is fsynced, so a crash leaves either the old or the new document, never a
//! mix. The file starts with a one-line header naming the format, its version and the SHA-256 of
//! the body; a document that fails the check, or that a newer vgpud wrote, stops the caller with
//! an explanation and a remedy rather than a guess.
//!
//! This crate owns durability only: what the document means (the ownership ledger, allocations,
//! layouts, intents) is the agent's. It must never hold state read from the host.

mod file;

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use file::{Header, decode, encode};

/// The default state directory.
pub const DEFAULT_DIR: &str = "/var/lib/vgpud";

const LOCK_FILE: &str = "lock";

/// Names the document kind and the newest schema version this build understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The document's format name, e.g. `vgpud-state`; also its file name (`<name>.json`).
    pub name: &'static str,
    /// The schema version written; older versions are read, newer ones refused.
    pub version: u32,
}

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process (or another handle in this one) holds the directory's lock.
    #[error(
        "state directory {} is locked by another vgpud instance; stop it first, or give this one another --state-dir",
        dir.display()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A file or directory operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The document is damaged: bad header, wrong checksum, or a body that does not parse.
    #[error(
        "state file {} is corrupt ({reason}); vgpud will not guess what it held: restore it from a backup, or move it aside to start empty (every slice on the host then counts as foreign and is left alone)",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The document was written by a newer vgpud.
    #[error(
        "state file {} has format version {found}, newer than the {supported} this vgpud understands; run the newer vgpud, or restore the file this version wrote",
        path.display()
    )]
    NewerVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The document has another format name (a different file put in its place).
    #[error(
        "state file {} holds a {found:?} document, not {expected:?}; move it aside",
        path.display()
    )]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// The format name found.
        found: String,
        /// The format name expected.
        expected: &'static str,
    },
    /// The value could not be encoded as JSON.
    #[error("cannot encode the state document")]
    Encode(#[source] serde_json::Error),
}

impl StoreError {
    fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}

/// A locked state directory and its document, kept in memory and written through on every change.
#[derive(Debug)]
pub struct Store<T> {
    dir: PathBuf,
    path: PathBuf,
    schema: Schema,
    /// Held for the store's lifetime; closing it releases the lock.
    _lock: File,
    current: T,
    /// Every successful write bumps it; for callers that cache derived views.
    generation: u64,
}

impl<T: Serialize + DeserializeOwned + Default + Clone> Store<T> {
    /// Opens (creating if needed) the state directory, takes its lock, and reads the document;
    /// a missing document is `T::default()`.
    pub fn open(dir: &Path, schema: Schema) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create directory", dir, e))?;
        let lock = take_lock(dir)?;
        let path = dir.join(format!("{}.json", schema.name));
        remove_stale_temp(&path)?;
        let current = match fs::read(&path) {
            Ok(bytes) => decode(&path, &bytes, schema)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => T::default(),
            Err(e) => return Err(StoreError::io("read", &path, e)),
        };
        Ok(Self {
            dir: dir.to_owned(),
            path,
            schema,
            _lock: lock,
            current,
            generation: 0,
        })
    }

    /// The document as last written.
    pub fn get(&self) -> &T {
        &self.current
    }

    /// Applies `change` to a copy, writes the copy durably, and only then makes it current: a
    /// failed write leaves the store (and the file) as they were.
    pub fn update<R>(&mut self, change: impl FnOnce(&mut T) -> R) -> Result<R, StoreError> {
        let mut next = self.current.clone();
        let out = change(&mut next);
        self.write(&next)?;
        self.current = next;
        self.generation += 1;
        Ok(out)
    }

    /// How many writes this handle has made.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The document's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&self, value: &T) -> Result<(), StoreError> {
        let bytes = encode(value, self.schema)?;
        let tmp = temp_path(&self.path);
        write_synced(&tmp, &bytes)?;
        fs::rename(&tmp, &self.path).map_err(|e| StoreError::io("rename", &tmp, e))?;
        // The rename is only durable once the directory entry is.
        let dir = File::open(&self.dir).map_err(|e| StoreError::io("open", &self.dir, e))?;
        dir.sync_all()
            .map_err(|e| StoreError::io("fsync", &self.dir, e))
    }
}

fn take_lock(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io("open", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::io("lock", &path, e)),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

/// A temporary file left by a crash during a write was never renamed: it is not the document.
fn remove_stale_temp(path: &Path) -> Result<(), StoreError> {
    let tmp = temp_path(path);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(StoreError::io("remove", &tmp, e))
        }
        _ => Ok(()),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let mut f = File::create(path).map_err(|e| StoreError::io("create", path, e))?;
    f.write_all(bytes)
        .map_err(|e| StoreError::io("write", path, e))?;
    f.sync_all().map_err(|e| StoreError::io("fsync", path, e))
}
