//! gasan's on-disk cache of checked modules: checked PTX and its site table (by the hash of the
//! original PTX and the options that change checked code) and the cubins compiled from checked PTX
//! (by [`crate::sass::cubin_key`]).
//!
//! - **Many processes at once.** Every entry is written to a private temporary file (process id,
//!   thread, counter in its name), flushed to disk, then renamed over the entry: a reader opens
//!   either the old complete file or the new complete one, never half of one. Two processes that
//!   fill the same entry write the same bytes; the second rename wins, harmlessly. A file a reader
//!   has open stays readable after another process evicts it.
//! - **Bounded, least recently used first.** A hit sets the entry's modification time to now
//!   ([`Cache::get`]); each insert removes the entries with the oldest modification times until the
//!   cache's files fit the budget ([`Cache::evict`]). Temporary files older than an hour (a writer
//!   that died) go too.
//! - **Only gasan's files.** Listing, eviction and clearing touch only names this module writes
//!   ([`entry_kind`]), so a cache directory shared with other files is safe to clear.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Prefix of temporary files (a leading dot keeps them out of casual listings).
const TMP_PREFIX: &str = ".gasan-tmp-";
/// Temporary files older than this belong to a writer that died.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// The cache directory the options name: `cache_dir`, else `$XDG_CACHE_HOME/gasan`, else
/// `~/.cache/gasan`.
pub fn dir_for(cache_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = cache_dir {
        return Some(d.to_path_buf());
    }
    let base = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("gasan"))
}

/// The key part of an entry's name: a 32-byte digest as 64 lowercase hex digits (what
/// [`entry_kind`] recognises).
pub fn key_hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What an entry holds, from its file name; `None` for files that are not gasan's.
pub fn entry_kind(name: &str) -> Option<&'static str> {
    if name.starts_with(TMP_PREFIX) {
        return Some("temporary");
    }
    let (key, rest) = name.split_at_checked(64)?;
    if !key.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
        return None;
    }
    match rest {
        ".ptx" => Some("checked-ptx"),
        ".sites.json" => Some("sites"),
        ".idx" => Some("stored-ptx-index"),
        ".preset" => Some("driver-check"),
        ".device" => Some("last-device"),
        r if r.starts_with(".sm_") && r.ends_with(".cubin") => Some("cubin"),
        r if r.starts_with(".sm_") && r.ends_with(".fail") => Some("compile-failed"),
        _ => None,
    }
}

/// One file of the cache.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub kind: &'static str,
    pub size: u64,
    /// Last use (the file's modification time).
    pub used: SystemTime,
}

/// A cache directory and its size budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    pub dir: PathBuf,
    pub budget: u64,
}

impl Cache {
    pub fn new(dir: PathBuf, budget: u64) -> Cache {
        Cache { dir, budget }
    }

    /// The entry's bytes, if present; a hit marks it as used now (least-recently-used order).
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let mut b = Vec::new();
        self.read_into(name, &mut b)?;
        Some(b)
    }

    /// [`Self::get`] appending to `buf` (which may hold bytes to keep in front of the entry's).
    pub fn read_into(&self, name: &str, buf: &mut Vec<u8>) -> Option<()> {
        let mut f = File::open(self.dir.join(name)).ok()?;
        if let Ok(m) = f.metadata() {
            buf.reserve(m.len() as usize + 8);
        }
        f.read_to_end(buf).ok()?;
        touch(&f);
        Some(())
    }

    /// Whether the entry exists (no touch).
    pub fn has(&self, name: &str) -> bool {
        self.dir.join(name).is_file()
    }

    /// A fresh temporary path in the cache directory, unique to this process, thread and call.
    pub fn tmp_path(&self, what: &str) -> std::io::Result<PathBuf> {
        static N: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tid = format!("{:?}", std::thread::current().id());
        let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
        Ok(self.dir.join(format!("{TMP_PREFIX}{}-{tid}-{n}.{what}", std::process::id())))
    }

    /// Writes `data` as entry `name` atomically (temporary file, fsync, rename), then evicts the
    /// least recently used entries beyond the budget.
    pub fn put(&self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let tmp = self.tmp_path("part")?;
        let r = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            f.sync_all()
        })();
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.adopt(&tmp, name)
    }

    /// Moves a complete file written elsewhere in the cache directory (e.g. by the compiler into a
    /// [`Cache::tmp_path`]) into place as entry `name`, atomically, then evicts.
    pub fn adopt(&self, tmp: &Path, name: &str) -> std::io::Result<()> {
        if let Ok(f) = File::open(tmp) {
            f.sync_all()?;
        }
        if let Err(e) = std::fs::rename(tmp, self.dir.join(name)) {
            let _ = std::fs::remove_file(tmp);
            return Err(e);
        }
        self.evict(Some(name));
        Ok(())
    }

    /// gasan's files in the directory (empty when it does not exist).
    pub fn entries(&self) -> Vec<Entry> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let kind = entry_kind(&name)?;
            let m = e.metadata().ok()?;
            m.is_file().then(|| Entry { name, kind, size: m.len(), used: m.modified().unwrap_or(SystemTime::UNIX_EPOCH) })
        })
        .collect()
    }

    /// Removes stale temporary files, then the least recently used entries until the rest fit the
    /// budget. `keep` (the entry just written) is never removed. Returns (files, bytes) removed.
    pub fn evict(&self, keep: Option<&str>) -> (usize, u64) {
        let now = SystemTime::now();
        let mut live = Vec::new();
        let (mut n, mut bytes) = (0, 0);
        for e in self.entries() {
            if e.kind == "temporary" {
                if now.duration_since(e.used).is_ok_and(|age| age > STALE_TMP) && std::fs::remove_file(self.dir.join(&e.name)).is_ok() {
                    n += 1;
                    bytes += e.size;
                }
                continue;
            }
            live.push(e);
        }
        let mut total: u64 = live.iter().map(|e| e.size).sum();
        if total <= self.budget {
            return (n, bytes);
        }
        live.sort_by_key(|e| e.used);
        for e in live {
            if total <= self.budget {
                break;
            }
            if Some(e.name.as_str()) == keep {
                continue;
            }
            // Another process may have removed it already: its bytes are gone either way.
            if std::fs::remove_file(self.dir.join(&e.name)).is_ok() {
                n += 1;
                bytes += e.size;
            }
            total = total.saturating_sub(e.size);
        }
        (n, bytes)
    }

    /// Removes every gasan file from the directory (other files stay). Returns (files, bytes).
    pub fn clear(&self) -> (usize, u64) {
        let (mut n, mut bytes) = (0, 0);
        for e in self.entries() {
            if std::fs::remove_file(self.dir.join(&e.name)).is_ok() {
                n += 1;
                bytes += e.size;
            }
        }
        (n, bytes)
    }
}

/// Sets a file's modification time to now (its last use); errors are ignored (a read-only cache
/// still serves hits).
fn touch(f: &File) {
    let times = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW }];
    // SAFETY: `f` is an open file descriptor for the duration of the call; `times` is two valid
    // timespecs, as futimens requires.
    unsafe { libc::futimens(f.as_raw_fd(), times.as_ptr()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gasan-cache-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn key(i: u8) -> String {
        format!("{:064x}", i)
    }

    fn set_used(c: &Cache, name: &str, secs_ago: u64) {
        let f = File::options().write(true).open(c.dir.join(name)).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago)).unwrap();
    }

    #[test]
    fn names_are_recognised_and_others_ignored() {
        assert_eq!(entry_kind(&format!("{}.ptx", key(1))), Some("checked-ptx"));
        assert_eq!(entry_kind(&format!("{}.sites.json", key(1))), Some("sites"));
        assert_eq!(entry_kind(&format!("{}.sm_90.cubin", key(1))), Some("cubin"));
        assert_eq!(entry_kind(&format!("{}.sm_90a.fail", key(1))), Some("compile-failed"));
        assert_eq!(entry_kind(&format!("{}.idx", key(1))), Some("stored-ptx-index"));
        assert_eq!(entry_kind(&format!("{}.preset", key(1))), Some("driver-check"));
        assert_eq!(entry_kind(&format!("{}.device", key(1))), Some("last-device"));
        assert_eq!(entry_kind(".gasan-tmp-1-2-3.part"), Some("temporary"));
        assert_eq!(entry_kind("notes.txt"), None);
        assert_eq!(entry_kind(&format!("{}.ptx", key(1).to_uppercase().replace('0', "G"))), None);
        assert_eq!(entry_kind(&format!("{}.exe", key(1))), None);
    }

    #[test]
    fn least_recently_used_go_first_until_the_budget_fits() {
        let d = tmpdir("lru");
        let c = Cache::new(d.clone(), 1 << 30);
        for i in 0..5u8 {
            c.put(&format!("{}.ptx", key(i)), &[i; 100]).unwrap();
            set_used(&c, &format!("{}.ptx", key(i)), 1000 - i as u64 * 10); // 0 oldest, 4 newest
        }
        std::fs::write(d.join("unrelated.bin"), [0u8; 1000]).unwrap();
        // A hit makes entry 0 the most recently used.
        assert_eq!(c.get(&format!("{}.ptx", key(0))).unwrap(), vec![0u8; 100]);
        let c = Cache::new(d.clone(), 250);
        assert_eq!(c.evict(None), (3, 300));
        let mut left: Vec<String> = c.entries().into_iter().map(|e| e.name).collect();
        left.sort();
        assert_eq!(left, vec![format!("{}.ptx", key(0)), format!("{}.ptx", key(4))]);
        assert!(d.join("unrelated.bin").exists(), "files that are not gasan's are never evicted");
        // An insert evicts down to the budget but keeps what it wrote, even when that alone is over.
        let c = Cache::new(d.clone(), 50);
        c.put(&format!("{}.sm_90.cubin", key(9)), &[9; 120]).unwrap();
        let left: Vec<String> = c.entries().into_iter().map(|e| e.name).collect();
        assert_eq!(left, vec![format!("{}.sm_90.cubin", key(9))]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stale_temporaries_are_removed_fresh_ones_kept() {
        let d = tmpdir("tmp");
        let c = Cache::new(d.clone(), 1 << 30);
        let old = c.tmp_path("part").unwrap();
        let new = c.tmp_path("part").unwrap();
        assert_ne!(old, new);
        std::fs::write(&old, b"x").unwrap();
        std::fs::write(&new, b"y").unwrap();
        File::options().write(true).open(&old).unwrap().set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
        assert_eq!(c.evict(None), (1, 1));
        assert!(!old.exists() && new.exists());
        assert_eq!(c.clear(), (1, 1));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn concurrent_writers_never_leave_a_torn_entry() {
        let d = tmpdir("torn");
        let c = Cache::new(d.clone(), 1 << 30);
        let name = format!("{}.sm_90.cubin", key(7));
        // Each writer's content is recognisable and of a different length; readers must only ever
        // see one of them whole.
        let content = |w: usize| -> Vec<u8> { (0..(1 << 18) + w * 4099).map(|i| (i as u8) ^ (w as u8)).collect() };
        std::thread::scope(|s| {
            for w in 0..4 {
                let c = c.clone();
                let name = name.clone();
                s.spawn(move || {
                    for _ in 0..30 {
                        c.put(&name, &content(w)).unwrap();
                    }
                });
            }
            for _ in 0..2 {
                let c = c.clone();
                let name = name.clone();
                s.spawn(move || {
                    let mut seen = 0;
                    while seen < 200 {
                        if let Some(b) = c.get(&name) {
                            assert!((0..4).any(|w| b == content(w)), "torn read of {} bytes", b.len());
                            seen += 1;
                        }
                    }
                });
            }
        });
        assert!(c.entries().iter().all(|e| e.kind != "temporary"), "no temporary file is left behind");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
