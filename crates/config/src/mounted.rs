//! Secrets held in memory at the paths a Secret volume would give them
//! (`TLS_MOUNT/NAMESPACE/SECRET/KEY`): what `tollgate run --kubernetes` reads from the cluster
//! (TLS certificates, htpasswd and CA Secrets) reaches the config and the TLS listeners as the
//! files the importer's translation names, without being written to disk. Every read of a file
//! the config names ([`crate::files`]) and of a certificate looks here first; a path not held
//! here is read from disk as before (a Secret mounted the usual way).
//!
//! One volume per process, replaced whole: a reader sees the old set or the new one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

/// One file held: its bytes, and a number that changes when they do (the certificate
/// watchers look twice a second, so it is not computed per look).
#[derive(Clone, PartialEq, Eq)]
pub struct Held {
    pub bytes: Arc<[u8]>,
    pub version: u64,
}

/// Never the bytes: they are keys and password hashes.
impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Held({} bytes, version {:x})",
            self.bytes.len(),
            self.version
        )
    }
}

impl Held {
    /// `bytes`, versioned by their hash.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Self {
        use std::hash::{Hash, Hasher};
        let bytes = bytes.into();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        Held {
            bytes,
            version: h.finish(),
        }
    }
}

/// The files held, by full path.
pub type Files = BTreeMap<PathBuf, Held>;

fn volume() -> &'static RwLock<Arc<Files>> {
    static VOLUME: OnceLock<RwLock<Arc<Files>>> = OnceLock::new();
    VOLUME.get_or_init(|| RwLock::new(Arc::new(Files::new())))
}

fn current() -> Arc<Files> {
    volume().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether `path` may be held: under [`crate::TLS_MOUNT`], without `..` (a Secret never
/// stands in for another file the config names).
pub fn may_hold(path: &Path) -> bool {
    path.starts_with(crate::TLS_MOUNT)
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Replaces every file held with `files`, unless one of them may not be held (that path is
/// the error, and nothing changes).
pub fn replace(files: Arc<Files>) -> Result<(), PathBuf> {
    if let Some(bad) = files.keys().find(|p| !may_hold(p)) {
        return Err(bad.clone());
    }
    *volume().write().unwrap_or_else(|e| e.into_inner()) = files;
    Ok(())
}

/// The bytes held at `path`.
pub fn read(path: &Path) -> Option<Arc<[u8]>> {
    current().get(path).map(|h| h.bytes.clone())
}

/// The names of the files held directly under `dir`, sorted.
pub fn list(dir: &Path) -> Vec<String> {
    current()
        .range(dir.to_path_buf()..)
        .take_while(|(p, _)| p.starts_with(dir))
        .filter(|(p, _)| p.parent() == Some(dir))
        .filter_map(|(p, _)| p.file_name()?.to_str().map(str::to_string))
        .collect()
}

/// Whether files are held under `dir` (a Secret read as a folder of files).
pub fn is_dir(dir: &Path) -> bool {
    !list(dir).is_empty()
}

/// The version of what is held at `path` (see [`Held`]); `None` when nothing is held there.
pub fn stamp(path: &Path) -> Option<u64> {
    current().get(path).map(|h| h.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One volume per process: the tests of this module share it, so one test says it all.
    #[test]
    fn held_files_are_read_listed_stamped_and_replaced_whole() {
        let dir = Path::new(crate::TLS_MOUNT).join("ns/site");
        let mut files = Files::new();
        files.insert(dir.join("tls.crt"), Held::new(&b"cert"[..]));
        files.insert(dir.join("tls.key"), Held::new(&b"key"[..]));
        replace(Arc::new(files.clone())).expect("under the mount");
        assert_eq!(read(&dir.join("tls.crt")).as_deref(), Some(&b"cert"[..]));
        assert!(is_dir(&dir));
        assert!(!is_dir(&dir.join("tls.crt")));
        assert!(!is_dir(Path::new(crate::TLS_MOUNT)));
        assert!(!is_dir(Path::new("/etc/tollgate/tls/ns/sit")));
        assert_eq!(list(&dir), vec!["tls.crt", "tls.key"]);
        let before = stamp(&dir.join("tls.crt"));
        assert!(before.is_some());

        // Nothing outside the mount, nor a way out of it: refused whole.
        for bad in [
            PathBuf::from("/etc/passwd"),
            Path::new(crate::TLS_MOUNT).join("../../passwd"),
            PathBuf::from("/etc/tollgate/tlsx/a"),
        ] {
            let mut f = files.clone();
            f.insert(bad.clone(), Held::new(&b"x"[..]));
            assert_eq!(replace(Arc::new(f)), Err(bad));
            assert_eq!(list(&dir).len(), 2, "nothing changed");
        }

        let mut renewed = Files::new();
        renewed.insert(dir.join("tls.crt"), Held::new(&b"cert 2"[..]));
        replace(Arc::new(renewed)).expect("under the mount");
        assert_ne!(stamp(&dir.join("tls.crt")), before);
        assert_eq!(read(&dir.join("tls.key")), None, "replaced whole");
        replace(Arc::default()).expect("empty");
        assert!(!is_dir(&dir));
    }
}
