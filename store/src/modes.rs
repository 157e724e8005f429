//! Permission bits of the state directory and its files, set explicitly so the umask of whoever
//! started vgpud does not decide them.
//!
//! The document names tenants (consumers, VMs) and the devices they hold, so it is the owner's
//! alone: files 0600, a directory vgpud creates 0700. systemd's `StateDirectoryMode=0700` covers
//! the directory under the unit but not the files (created with the unit's `UMask=0022`: 0644),
//! and a daemon started by hand or by another init gets whatever its umask allows (issue 14,
//! defect 9). An existing directory keeps its group bits (0750 with the daemon's group is a
//! deliberate choice) and loses only the bits for others.

use std::fs::{self, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::StoreError;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;
const OTHERS: u32 = 0o007;

/// Creates `dir` (and missing parents) 0700, or takes the bits for others off an existing one.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| StoreError::io("create directory", parent, e))?;
    }
    match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        // The umask may have taken owner bits too: set exactly 0700.
        Ok(()) => set_mode(dir, DIR_MODE),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => drop_others(dir),
        Err(e) => Err(StoreError::io("create directory", dir, e)),
    }
}

/// Opens with `options`, creating the file 0600; an existing file keeps its owner and group
/// bits and loses those for others.
pub(crate) fn open_private(options: &mut OpenOptions, path: &Path) -> Result<File, StoreError> {
    let file = options
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| StoreError::io("open", path, e))?;
    restrict(&file, path)?;
    Ok(file)
}

/// A new file (replacing any), exactly 0600.
pub(crate) fn create_private_file(path: &Path) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| StoreError::io("create", path, e))?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))
        .map_err(|e| StoreError::io("chmod", path, e))?;
    Ok(file)
}

/// Takes the bits for others off an existing file (a document written by an older build).
pub(crate) fn restrict_file(path: &Path) -> Result<(), StoreError> {
    drop_others(path)
}

fn restrict(file: &File, path: &Path) -> Result<(), StoreError> {
    let mode = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .permissions()
        .mode();
    if mode & OTHERS != 0 {
        file.set_permissions(Permissions::from_mode(mode & 0o7770))
            .map_err(|e| StoreError::io("chmod", path, e))?;
    }
    Ok(())
}

fn drop_others(path: &Path) -> Result<(), StoreError> {
    let mode = fs::metadata(path)
        .map_err(|e| StoreError::io("stat", path, e))?
        .permissions()
        .mode();
    if mode & OTHERS == 0 {
        return Ok(());
    }
    set_mode(path, mode & 0o7770)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StoreError> {
    fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(|e| StoreError::io("chmod", path, e))
}
