//! A builder for sysfs-shaped directory trees, for parser tests and captured host snapshots.
//!
//! The tree is written to a real directory so [`crate::RealSysfs`] reads it through the same code
//! path as on a host, links included. Panics on I/O errors: it is a test and tooling helper.
#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// Writes files, directories and relative symbolic links under a root directory.
#[derive(Debug, Clone)]
pub struct Tree {
    root: PathBuf,
}

impl Tree {
    /// A builder writing under `root` (which should exist, e.g. a temporary directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    /// The backing directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    fn backing(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }
    /// Creates a directory and its parents.
    pub fn dir(&self, host_path: &str) -> &Self {
        fs::create_dir_all(self.backing(host_path)).expect("create fixture directory");
        self
    }
    /// Writes a text file, creating parent directories.
    pub fn file(&self, host_path: &str, contents: &str) -> &Self {
        self.bytes(host_path, contents.as_bytes())
    }
    /// Writes a file with raw bytes, creating parent directories.
    pub fn bytes(&self, host_path: &str, contents: &[u8]) -> &Self {
        let path = self.backing(host_path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create fixture parent");
        }
        fs::write(path, contents).expect("write fixture file");
        self
    }
    /// Creates a symbolic link at `host_path` whose stored target is `target` (kept verbatim,
    /// so relative targets behave as the kernel's do).
    pub fn link(&self, host_path: &str, target: &str) -> &Self {
        let path = self.backing(host_path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create fixture parent");
        }
        let _ = fs::remove_file(&path);
        std::os::unix::fs::symlink(target, path).expect("create fixture link");
        self
    }
}
