//! Crash-safe state files for vgpud's desired state.
//!
//! A [`Store`] is one directory (default `/var/lib/vgpud`) holding one JSON document of the
//! caller's type, guarded by an exclusive lock on the directory itself (and on `<dir>/lock`, which
//! older builds used) so a second agent instance is kept out even when someone deletes the lock
//! file. The directory is 0700 and the files 0600 whatever the umask: the document names tenants.
//! Every change is written whole: to a temporary file, fsynced, renamed over the document,
//! then the directory is fsynced, so a crash leaves either the old or the new document, never a
//! mix. The file starts with a one-line header naming the format, its version and the SHA-256 of
//! the body; a document that fails the check, or that a newer vgpud wrote, stops the caller with
//! an explanation and a remedy rather than a guess; so does a document whose records contradict
//! each other (the caller's [`Store::open_checked`] rule).
//!
//! This crate owns durability only: what the document means (the ownership ledger, allocations,
//! layouts, intents) is the agent's. It must never hold state read from the host.

mod file;
mod lock;
mod modes;

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use file::{Header, decode, encode};

/// The default state directory.
pub const DEFAULT_DIR: &str = "/var/lib/vgpud";

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
    /// The document is damaged: bad header, wrong checksum, a body that does not parse, or
    /// records that contradict each other.
    #[error(
        "state file {} is corrupt ({reason}); vgpud will not guess what it held: restore it from a backup, or move it aside and run `vgpud state recover` to rebuild the ledger from the host (allocations and layouts are not recovered)",
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
    /// The document is missing although the host shows what the caller created with it.
    #[error(
        "state file {} is missing, but the host shows slices vgpud created: {found}; vgpud will not start empty and count them as foreign: restore the file from a backup, or run `vgpud state recover --state-dir {}` to rebuild the ledger from the host",
        path.display(),
        path.parent().unwrap_or(Path::new(".")).display()
    )]
    Missing {
        /// The file.
        path: PathBuf,
        /// What the host shows, as the caller describes it.
        found: String,
    },
    /// The caller asked to rebuild a document that exists.
    #[error(
        "state file {} exists; recovery only rebuilds a missing one: move it aside first (it is not removed)",
        path.display()
    )]
    Exists {
        /// The file.
        path: PathBuf,
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
    _lock: lock::DirLock,
    current: T,
    /// Whether the document was read from its file (false: the file was missing).
    loaded: bool,
    /// Every successful write bumps it; for callers that cache derived views.
    generation: u64,
}

impl<T: Serialize + DeserializeOwned + Default + Clone> Store<T> {
    /// Opens (creating if needed) the state directory, takes its lock, and reads the document;
    /// a missing document is `T::default()` ([`Store::loaded`] says which).
    pub fn open(dir: &Path, schema: Schema) -> Result<Self, StoreError> {
        Self::open_checked(dir, schema, |_| Ok(()))
    }

    /// As [`Store::open`], and refuses a document that `check` finds inconsistent (its records
    /// contradict each other) as [`StoreError::Corrupt`] with `check`'s reason: a checksum only
    /// proves the bytes are the ones written, not that the writer was right.
    pub fn open_checked(
        dir: &Path,
        schema: Schema,
        check: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<Self, StoreError> {
        modes::create_private_dir(dir)?;
        let lock = lock::DirLock::take(dir)?;
        let path = dir.join(format!("{}.json", schema.name));
        remove_stale_temp(&path)?;
        let (current, loaded) = match fs::read(&path) {
            Ok(bytes) => (decode(&path, &bytes, schema)?, true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (T::default(), false),
            Err(e) => return Err(StoreError::io("read", &path, e)),
        };
        if loaded {
            modes::restrict_file(&path)?;
        }
        check(&current).map_err(|reason| StoreError::Corrupt {
            path: path.clone(),
            reason: format!("its records contradict each other: {reason}"),
        })?;
        Ok(Self {
            dir: dir.to_owned(),
            path,
            schema,
            _lock: lock,
            current,
            loaded,
            generation: 0,
        })
    }

    /// Opens the state directory for a document that must not exist yet (rebuilding a lost one):
    /// takes the lock, and refuses with [`StoreError::Exists`] when the file is there, whatever
    /// it holds. The document is `T::default()` until the first [`Store::update`] writes it.
    pub fn create_new(dir: &Path, schema: Schema) -> Result<Self, StoreError> {
        modes::create_private_dir(dir)?;
        let lock = lock::DirLock::take(dir)?;
        let path = dir.join(format!("{}.json", schema.name));
        remove_stale_temp(&path)?;
        match fs::symlink_metadata(&path) {
            Ok(_) => return Err(StoreError::Exists { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("stat", &path, e)),
        }
        Ok(Self {
            dir: dir.to_owned(),
            path,
            schema,
            _lock: lock,
            current: T::default(),
            loaded: false,
            generation: 0,
        })
    }

    /// Whether the document was read from its file; false when the file was missing and the
    /// document is the default.
    pub fn loaded(&self) -> bool {
        self.loaded
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
    let mut f = modes::create_private_file(path)?;
    f.write_all(bytes)
        .map_err(|e| StoreError::io("write", path, e))?;
    f.sync_all().map_err(|e| StoreError::io("fsync", path, e))
}
