//! The store's promises: atomic write-through, refusal of damaged or newer files, one owner.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;
use std::fs;

use store::{Schema, Store, StoreError};

const SCHEMA: Schema = Schema {
    name: "test-state",
    version: 2,
};

type Doc = BTreeMap<String, u32>;

fn open(dir: &std::path::Path) -> Result<Store<Doc>, StoreError> {
    Store::open(dir, SCHEMA)
}

#[test]
fn missing_document_is_default_and_writes_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    {
        let mut s = open(&dir).unwrap();
        assert!(s.get().is_empty());
        s.update(|d| d.insert("a".into(), 1)).unwrap();
        s.update(|d| d.insert("b".into(), 2)).unwrap();
        assert_eq!(s.generation(), 2);
    }
    let s = open(&dir).unwrap();
    assert_eq!(s.get().get("a"), Some(&1));
    assert_eq!(s.get().get("b"), Some(&2));
    let text = fs::read_to_string(dir.join("test-state.json")).unwrap();
    assert!(
        text.starts_with("{\"format\":\"test-state\",\"version\":2,"),
        "{text}"
    );
    assert!(!dir.join("test-state.json.tmp").exists());
}

#[test]
fn second_open_of_a_locked_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open(tmp.path()).unwrap();
    let err = open(tmp.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains(&tmp.path().display().to_string()));
    drop(first);
    open(tmp.path()).unwrap();
}

fn write_raw(dir: &std::path::Path, bytes: &[u8]) {
    fs::write(dir.join("test-state.json"), bytes).unwrap();
}

fn good_bytes(doc: &Doc) -> Vec<u8> {
    store::encode(doc, SCHEMA).unwrap()
}

#[test]
fn damaged_files_are_refused_with_a_remedy() {
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = Doc::new();
    doc.insert("slice".into(), 7);
    let good = good_bytes(&doc);
    let mut flipped = good.clone();
    let last = flipped.len() - 3;
    flipped[last] ^= 0x01;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"not json at all\n{}".to_vec()),
        ("no header", b"{}".to_vec()),
        ("torn", good[..good.len() - 5].to_vec()),
        ("flipped byte", flipped),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in cases {
        write_raw(tmp.path(), &bytes);
        let err = open(tmp.path()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{what}: {text}");
        assert!(text.contains("move it aside"), "{what}: {text}");
        assert!(text.contains("test-state.json"), "{what}: {text}");
    }
    write_raw(tmp.path(), &good);
    assert_eq!(open(tmp.path()).unwrap().get(), &doc);
}

#[test]
fn newer_versions_and_other_formats_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let newer = store::encode(
        &Doc::new(),
        Schema {
            name: "test-state",
            version: 9,
        },
    )
    .unwrap();
    write_raw(tmp.path(), &newer);
    let err = open(tmp.path()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerVersion {
                found: 9,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );
    let other = store::encode(
        &Doc::new(),
        Schema {
            name: "other",
            version: 1,
        },
    )
    .unwrap();
    write_raw(tmp.path(), &other);
    assert!(matches!(
        open(tmp.path()).unwrap_err(),
        StoreError::WrongFormat { .. }
    ));
    // An older version is read.
    let older = store::encode(
        &Doc::new(),
        Schema {
            name: "test-state",
            version: 1,
        },
    )
    .unwrap();
    write_raw(tmp.path(), &older);
    open(tmp.path()).unwrap();
}

#[test]
fn a_failed_write_leaves_the_document_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = open(tmp.path()).unwrap();
    s.update(|d| d.insert("kept".into(), 1)).unwrap();
    // A directory where the temporary file must go makes the write fail.
    fs::create_dir(tmp.path().join("test-state.json.tmp")).unwrap();
    let err = s.update(|d| d.insert("lost".into(), 2)).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert_eq!(s.get().get("lost"), None);
    assert_eq!(s.get().get("kept"), Some(&1));
    fs::remove_dir(tmp.path().join("test-state.json.tmp")).unwrap();
    drop(s);
    let s = open(tmp.path()).unwrap();
    assert_eq!(s.get().len(), 1);
}

#[test]
fn a_stale_temporary_file_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mut s = open(tmp.path()).unwrap();
        s.update(|d| d.insert("a".into(), 1)).unwrap();
    }
    fs::write(tmp.path().join("test-state.json.tmp"), b"half a write").unwrap();
    let s = open(tmp.path()).unwrap();
    assert_eq!(s.get().get("a"), Some(&1));
    assert!(!tmp.path().join("test-state.json.tmp").exists());
}

#[test]
fn the_lock_holds_when_the_lock_file_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open(tmp.path()).unwrap();
    fs::remove_file(tmp.path().join("lock")).unwrap();
    let err = open(tmp.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("locked by another vgpud instance"));
    drop(first);
    open(tmp.path()).unwrap();
}

#[test]
fn contradicting_records_are_refused_like_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = Doc::new();
    doc.insert("twice".into(), 2);
    write_raw(tmp.path(), &good_bytes(&doc));
    let check = |d: &Doc| match d.get("twice") {
        Some(2) => Err("\"twice\" is 2".to_owned()),
        _ => Ok(()),
    };
    let err = Store::open_checked(tmp.path(), SCHEMA, check).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{text}");
    assert!(
        text.contains("contradict each other: \"twice\" is 2"),
        "{text}"
    );
    assert!(text.contains("vgpud state recover"), "{text}");
    // The refusal released the lock: a consistent document opens.
    doc.insert("twice".into(), 1);
    write_raw(tmp.path(), &good_bytes(&doc));
    let s = Store::open_checked(tmp.path(), SCHEMA, check).unwrap();
    assert!(s.loaded());
}

#[test]
fn a_missing_document_is_reported_as_not_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = open(tmp.path()).unwrap();
    assert!(!s.loaded());
    s.update(|d| d.insert("a".into(), 1)).unwrap();
    drop(s);
    assert!(open(tmp.path()).unwrap().loaded());
}

/// Sets the process's umask for the test's life (nextest runs each test in its own process).
struct Umask(rustix::fs::Mode);

impl Umask {
    fn set(mask: u32) -> Self {
        Umask(rustix::process::umask(rustix::fs::Mode::from_raw_mode(
            mask,
        )))
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        rustix::process::umask(self.0);
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn state_is_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    {
        let _open_umask = Umask::set(0o000);
        let mut s = open(&dir).unwrap();
        s.update(|d| d.insert("tenant".into(), 1)).unwrap();
    }
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("test-state.json")), 0o600);
    assert_eq!(mode(&dir.join("lock")), 0o600);
    // Files an older build left world-readable, in a world-readable directory with a group:
    // others lose their bits, the group keeps its own.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.join("test-state.json");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(dir.join("lock"), fs::Permissions::from_mode(0o666)).unwrap();
    let _umask = Umask::set(0o000);
    let s = open(&dir).unwrap();
    assert_eq!(mode(&dir), 0o750);
    assert_eq!(mode(&state), 0o640);
    assert_eq!(mode(&dir.join("lock")), 0o660);
    let mut s = s;
    s.update(|d| d.insert("tenant".into(), 2)).unwrap();
    assert_eq!(mode(&state), 0o600, "a rewrite is 0600");
}

#[test]
fn create_new_refuses_an_existing_document_and_takes_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mut s = Store::<Doc>::create_new(tmp.path(), SCHEMA).unwrap();
        assert!(open(tmp.path()).is_err(), "create_new holds the lock");
        s.update(|d| d.insert("rebuilt".into(), 1)).unwrap();
    }
    let err = Store::<Doc>::create_new(tmp.path(), SCHEMA).unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("move it aside"), "{err}");
    // Even a damaged file is kept, not overwritten.
    write_raw(tmp.path(), b"garbage");
    let err = Store::<Doc>::create_new(tmp.path(), SCHEMA).unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");
    assert_eq!(
        fs::read(tmp.path().join("test-state.json")).unwrap(),
        b"garbage"
    );
}
