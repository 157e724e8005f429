//! Where the model lives: in memory, or in `<dir>/host.json` shared between processes.
//!
//! Every operation takes the process-local mutex, then (with a directory) a `flock` on
//! `<dir>/lock` — shared to read, exclusive to change — reloads `host.json` if another handle
//! replaced it, works on the model, and on a change writes a new `host.json` atomically (temp
//! file, fsync, rename, fsync of the directory). A read whose `host.json` is the one it last
//! read skips the lock: the file is only ever replaced whole, by rename, so an unchanged one is
//! a committed state, and a change in flight has not happened yet. A change runs on a copy that is only kept when
//! the operation succeeds, so a refused write changes nothing. MIG GPU and compute instances,
//! which do not outlive the driver, are written without the syncs (a crashed process still
//! leaves a whole file). Telemetry, which nothing depends on, is written at most every
//! [`VOLATILE_SAVE_AFTER`], with the next other change, or when the store is dropped; a handle
//! that reloads the file meanwhile keeps its own newer samples. Both keep the rendered sysfs
//! tree when what it shows is unchanged.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::SimError;
use crate::state::{FORMAT, Hw, State};
use crate::tree::{self, Tree};

const STATE_FILE: &str = "host.json";
const LOCK_FILE: &str = "lock";

/// How long telemetry samples may stay in memory only. A telemetry read wrote the whole host
/// (16 reads a second with 1 s telemetry on 16 GPUs, a fifth of the idle daemon's CPU); now a
/// crash loses at most this much of the walk, which nothing depends on.
const VOLATILE_SAVE_AFTER: Duration = Duration::from_secs(2);

/// Identity of the state file as last read or written; a replacement by rename changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

#[derive(Debug)]
struct Backing {
    dir: PathBuf,
    lock: File,
}

#[derive(Debug)]
struct Cache {
    state: State,
    hw: Arc<Hw>,
    tree: Option<Arc<Tree>>,
    stamp: Option<Stamp>,
    /// Since when `state` holds volatile changes the state file does not.
    unsaved: Option<Instant>,
}

/// The shared model behind every handle of one host.
#[derive(Debug)]
pub(crate) struct Store {
    backing: Option<Backing>,
    cache: Mutex<Cache>,
}

/// A read-only view handed to readers.
pub(crate) struct View<'a> {
    pub state: &'a State,
    pub hw: &'a Hw,
    tree: &'a mut Option<Arc<Tree>>,
}

impl View<'_> {
    /// The sysfs tree of this state, rendered on first use.
    pub(crate) fn tree(&mut self) -> Arc<Tree> {
        if let Some(t) = self.tree.as_ref() {
            return t.clone();
        }
        let t = Arc::new(tree::render(self.state, self.hw));
        *self.tree = Some(t.clone());
        t
    }
}

enum LockKind {
    Shared,
    Exclusive,
}

struct FileLock<'a>(Option<&'a File>);

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            // Closing would release it too; an unlock failure leaves nothing to recover.
            let _ = f.unlock();
        }
    }
}

impl Store {
    pub(crate) fn in_memory(state: State) -> Self {
        let hw = Arc::new(Hw::build(&state.profile));
        Self {
            backing: None,
            cache: Mutex::new(Cache {
                state,
                hw,
                tree: None,
                stamp: None,
                unsaved: None,
            }),
        }
    }

    /// A new state directory with this state; fails if one exists.
    pub(crate) fn create(dir: &Path, state: State) -> Result<Self, SimError> {
        fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
        let lock = open_lock(dir)?;
        let store = Self::from_parts(dir, lock, state);
        {
            let cache = store.lock_cache();
            let _guard = store.file_lock(LockKind::Exclusive)?;
            if dir.join(STATE_FILE).exists() {
                return Err(SimError::StateExists {
                    dir: dir.to_owned(),
                });
            }
            let mut cache = cache;
            let stamp = store.save(&cache.state)?;
            cache.stamp = Some(stamp);
        }
        Ok(store)
    }

    /// An existing state directory.
    pub(crate) fn open(dir: &Path) -> Result<Self, SimError> {
        if !dir.join(STATE_FILE).exists() {
            return Err(SimError::NoState {
                dir: dir.to_owned(),
            });
        }
        let lock = open_lock(dir)?;
        let _guard = lock_file(&lock, LockKind::Shared, dir)?;
        let (state, stamp) = load(&dir.join(STATE_FILE))?;
        drop(_guard);
        let store = Self::from_parts(dir, lock, state);
        store.lock_cache().stamp = Some(stamp);
        Ok(store)
    }

    fn from_parts(dir: &Path, lock: File, state: State) -> Self {
        let hw = Arc::new(Hw::build(&state.profile));
        Self {
            backing: Some(Backing {
                dir: dir.to_owned(),
                lock,
            }),
            cache: Mutex::new(Cache {
                state,
                hw,
                tree: None,
                stamp: None,
                unsaved: None,
            }),
        }
    }

    pub(crate) fn dir(&self) -> Option<&Path> {
        self.backing.as_ref().map(|b| b.dir.as_path())
    }

    fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        // A panic while holding the lock cannot leave a half-applied change: changes are made on
        // a copy. So a poisoned lock is still consistent.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file_lock(&self, kind: LockKind) -> Result<FileLock<'_>, SimError> {
        match &self.backing {
            None => Ok(FileLock(None)),
            Some(b) => lock_file(&b.lock, kind, &b.dir),
        }
    }

    /// Whether the state file is the one `cache` holds (always, in memory).
    fn unchanged(&self, cache: &Cache) -> Result<bool, SimError> {
        let Some(b) = &self.backing else {
            return Ok(true);
        };
        let path = b.dir.join(STATE_FILE);
        let meta = fs::metadata(&path).map_err(|e| SimError::io(&path, e))?;
        Ok(cache.stamp == Some(Stamp::of(&meta)))
    }

    fn refresh(&self, cache: &mut Cache) -> Result<(), SimError> {
        let Some(b) = &self.backing else {
            return Ok(());
        };
        let path = b.dir.join(STATE_FILE);
        let meta = fs::metadata(&path).map_err(|e| SimError::io(&path, e))?;
        if cache.stamp == Some(Stamp::of(&meta)) {
            return Ok(());
        }
        let (mut state, stamp) = load(&path)?;
        if state.profile != cache.state.profile {
            cache.hw = Arc::new(Hw::build(&state.profile));
        }
        if cache.unsaved.is_some() {
            // Another handle's change must not take back samples this one has handed out.
            crate::telemetry::keep_newer(&mut state, &cache.state);
        }
        cache.state = state;
        cache.tree = None;
        cache.stamp = Some(stamp);
        Ok(())
    }

    fn save(&self, state: &State) -> Result<Stamp, SimError> {
        self.save_with(state, true)
    }

    /// Writes the state file by rename; `durable` also syncs the file and the directory (a
    /// power loss then keeps the change), which what nothing depends on does without.
    fn save_with(&self, state: &State, durable: bool) -> Result<Stamp, SimError> {
        let Some(b) = &self.backing else {
            return Ok(Stamp {
                ino: 0,
                size: 0,
                mtime: 0,
                mtime_nsec: 0,
            });
        };
        let json = serde_json::to_vec(state).map_err(SimError::Encode)?;
        let path = b.dir.join(STATE_FILE);
        let tmp = b
            .dir
            .join(format!("{STATE_FILE}.tmp.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&json)?;
            if durable {
                f.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| SimError::io(&tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| SimError::io(&path, e))?;
        if durable {
            File::open(&b.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| SimError::io(&b.dir, e))?;
        }
        let meta = fs::metadata(&path).map_err(|e| SimError::io(&path, e))?;
        Ok(Stamp::of(&meta))
    }

    /// Runs `f` on the cached state without looking for changes by other handles: for what
    /// never changes (the profile).
    pub(crate) fn peek<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock_cache().state)
    }

    /// Runs `f` on the current state without changing it.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&mut View<'_>) -> T) -> Result<T, SimError> {
        let mut cache = self.lock_cache();
        if !self.unchanged(&cache)? {
            let _guard = self.file_lock(LockKind::Shared)?;
            self.refresh(&mut cache)?;
        }
        let Cache {
            state, hw, tree, ..
        } = &mut *cache;
        let mut view = View { state, hw, tree };
        Ok(f(&mut view))
    }

    /// Runs `f` on a copy of the state and keeps the copy if `f` succeeds and changed it.
    pub(crate) fn write<T, E>(
        &self,
        f: impl FnOnce(&mut State, &Hw) -> Result<T, E>,
    ) -> Result<Result<T, E>, SimError> {
        self.change(Change::Shown, f)
    }

    /// Runs `f` on a copy of the state and keeps the copy if `f` succeeds and changed it, as
    /// a change of this kind.
    pub(crate) fn change<T, E>(
        &self,
        kind: Change,
        f: impl FnOnce(&mut State, &Hw) -> Result<T, E>,
    ) -> Result<Result<T, E>, SimError> {
        let mut cache = self.lock_cache();
        let _guard = self.file_lock(LockKind::Exclusive)?;
        self.refresh(&mut cache)?;
        let mut next = cache.state.clone();
        let hw = cache.hw.clone();
        let out = f(&mut next, &hw);
        if out.is_ok() && next != cache.state {
            let shown = kind == Change::Shown;
            if shown {
                // The kernel announces each change it makes; so does the model.
                crate::uevent::record(&cache.state, &mut next, &hw);
            }
            if kind == Change::Volatile {
                cache.state = next;
                self.save_volatile(&mut cache)?;
                return Ok(out);
            }
            let keep_tree = match kind {
                Change::Shown => false,
                Change::Instances => {
                    debug_assert!(
                        only_instances_differ(&cache.state, &next),
                        "an instance change changed more than instances"
                    );
                    tree::instances_shown(&cache.state) == tree::instances_shown(&next)
                }
                Change::Volatile => true,
            };
            let stamp = self.save_with(&next, shown)?;
            cache.state = next;
            if !keep_tree {
                cache.tree = None;
            }
            cache.stamp = Some(stamp);
            cache.unsaved = None;
        }
        Ok(out)
    }

    /// Notes that `cache` holds volatile changes, and writes them when they are
    /// [`VOLATILE_SAVE_AFTER`] old; the caller holds the exclusive file lock and has refreshed
    /// `cache`.
    fn save_volatile(&self, cache: &mut Cache) -> Result<(), SimError> {
        if self.backing.is_none() {
            return Ok(());
        }
        let since = *cache.unsaved.get_or_insert_with(Instant::now);
        if since.elapsed() >= VOLATILE_SAVE_AFTER {
            self.save_unsynced(cache)?;
        }
        Ok(())
    }

    /// Writes `cache`'s state without the syncs and notes that the file holds it all.
    fn save_unsynced(&self, cache: &mut Cache) -> Result<(), SimError> {
        cache.stamp = Some(self.save_with(&cache.state, false)?);
        cache.unsaved = None;
        Ok(())
    }

    /// Writes what only memory holds (a dropped handle's last telemetry samples).
    fn save_unsaved(&self) -> Result<(), SimError> {
        let mut cache = self.lock_cache();
        if cache.unsaved.is_none() {
            return Ok(());
        }
        let _guard = self.file_lock(LockKind::Exclusive)?;
        self.refresh(&mut cache)?;
        self.save_unsynced(&mut cache)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // The next process continues the telemetry walk where this one left it; a failure
        // loses a few samples, which nothing depends on.
        let _ = self.save_unsaved();
    }
}

/// Whether `after` is `before` but for the GPUs' MIG instances (what an instance change may
/// touch; checked in debug builds, so that the tests catch a call that does more).
fn only_instances_differ(before: &State, after: &State) -> bool {
    let mut same = after.clone();
    for (addr, g) in &mut same.gpus {
        g.gis = before
            .gpus
            .get(addr)
            .map(|b| b.gis.clone())
            .unwrap_or_default();
    }
    same == *before
}

/// What a state change is to the host it models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Sysfs shows it and a uevent announces it; kept durably.
    Shown,
    /// MIG GPU and compute instances alone (NVML's instance calls): the kernel announces none
    /// (NVML makes them through the driver's device files, not the device model, so no uevent),
    /// sysfs shows them only in what [`tree::instances_shown`] covers, so the rendered tree is
    /// kept when that is unchanged, and the state file is replaced without a sync: instances do
    /// not outlive the driver (a reboot clears them, `State::boot`; NVIDIA's MIG user guide has
    /// them re-created after each boot), so a power loss that loses the last one loses nothing
    /// the host would keep.
    Instances,
    /// What neither sysfs shows nor a uevent announces (the telemetry walk): the sysfs tree
    /// stays rendered, no uevent is looked for, and the state file is replaced by rename
    /// without syncing it, at most every [`VOLATILE_SAVE_AFTER`] (with the next other change,
    /// or when the store is dropped): a crash loses the last samples, which nothing depends
    /// on. A telemetry read is then a change in memory, not a write of the whole host.
    Volatile,
}

fn open_lock(dir: &Path) -> Result<File, SimError> {
    let path = dir.join(LOCK_FILE);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| SimError::io(&path, e))
}

fn lock_file<'a>(file: &'a File, kind: LockKind, dir: &Path) -> Result<FileLock<'a>, SimError> {
    let res = match kind {
        LockKind::Shared => file.lock_shared(),
        LockKind::Exclusive => file.lock(),
    };
    res.map_err(|e| SimError::io(dir.join(LOCK_FILE), e))?;
    Ok(FileLock(Some(file)))
}

fn load(path: &Path) -> Result<(State, Stamp), SimError> {
    let mut file = File::open(path).map_err(|e| SimError::io(path, e))?;
    let meta = file.metadata().map_err(|e| SimError::io(path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| SimError::io(path, e))?;
    #[derive(serde::Deserialize)]
    struct Header {
        format: u32,
    }
    let header: Header = serde_json::from_slice(&bytes).map_err(|e| SimError::CorruptState {
        path: path.to_owned(),
        source: e,
    })?;
    if header.format != FORMAT {
        return Err(SimError::StateFormat {
            path: path.to_owned(),
            found: header.format,
            expected: FORMAT,
        });
    }
    let state: State = serde_json::from_slice(&bytes).map_err(|e| SimError::CorruptState {
        path: path.to_owned(),
        source: e,
    })?;
    state.profile.validate()?;
    Ok((state, Stamp::of(&meta)))
}
