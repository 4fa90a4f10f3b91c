//! Files the kernel writes anew at every read (cgroupfs, procfs, sysfs),
//! kept open between cycles and read again from their start.
//!
//! Opening a cgroup file costs a path walk through kernfs each time, about
//! as much as generating its text: a cycle over 110 pods' cgroups spends
//! half its reading time opening and closing. A kept file is read with
//! `pread` at offset 0, which makes the kernel generate its text afresh.
//! Only files on those virtual filesystems are kept: a regular file may be
//! replaced by a rename (as the testbed writes its node files), and a kept
//! descriptor would go on reading the old one. A file that fails to read
//! (its cgroup removed: the kernel answers `ENODEV`) is closed and opened
//! again once, so an error is always the path's own. [`KeptFiles::sweep`]
//! closes what a cycle no longer read (the pods that left), and the number
//! kept is bounded: past it, files are opened for each read as before.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Filesystems whose files are generated at each read, by `statfs` type.
const VIRTUAL: [u64; 4] = [
    0x0027_e0eb, // cgroup (v1)
    0x6367_7270, // cgroup2
    0x0000_9fa0, // proc
    0x6265_6572, // sysfs
];

/// At most this many files are kept, whatever the process may open.
const MOST: usize = 4096;

/// Open virtual files, by path; see the module docs.
#[derive(Debug)]
pub struct KeptFiles {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<PathBuf, Kept>,
    /// Counts sweeps: a file read since the last one carries its number.
    generation: u64,
    /// Where each read lands (kept, so a cycle's hundreds of reads
    /// allocate only their text).
    buffer: Vec<u8>,
}

#[derive(Debug)]
struct Kept {
    file: File,
    read_in: u64,
}

impl Default for KeptFiles {
    /// Keeps up to a quarter of the open files the process may have (at
    /// most 4096): the rest stays for sockets, policies and watches.
    fn default() -> Self {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(MOST as u64 * 4);
        Self::new(usize::try_from(soft / 4).unwrap_or(MOST).min(MOST))
    }
}

impl KeptFiles {
    /// Keeps at most `capacity` files open (0: none; every read opens).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::new(State::default()),
        }
    }

    /// The whole text of `path`, from a kept descriptor if there is one.
    ///
    /// # Errors
    /// The file cannot be opened or read.
    pub fn read(&self, path: &Path) -> io::Result<String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let State {
            files,
            generation,
            buffer,
        } = &mut *state;
        if let Some(kept) = files.get_mut(path) {
            match read_from_start(&kept.file, buffer) {
                Ok(text) => {
                    kept.read_in = *generation;
                    return Ok(text);
                }
                Err(_) => {
                    files.remove(path);
                }
            }
        }
        let file = File::open(path)?;
        let text = read_from_start(&file, buffer)?;
        if files.len() < self.capacity && is_virtual(&file) {
            let kept = Kept {
                file,
                read_in: *generation,
            };
            files.insert(path.to_owned(), kept);
        }
        Ok(text)
    }

    /// Closes the files not read since the last sweep.
    pub fn sweep(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = state.generation;
        state.files.retain(|_, kept| kept.read_in == generation);
        state.generation += 1;
    }

    /// How many files are open.
    pub fn len(&self) -> usize {
        self.state.lock().map_or(0, |state| state.files.len())
    }

    /// Whether no file is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `file` whole from offset 0 into `bytes` (grown as needed, never
/// shrunk), whatever was read of it before. A
/// read that leaves room in the buffer is taken as the end: the kernel
/// hands a generated file's whole text to a read that has room for it,
/// and a regular file's rest (saving a second call per file).
fn read_from_start(file: &File, bytes: &mut Vec<u8>) -> io::Result<String> {
    if bytes.len() < 4096 {
        bytes.resize(4096, 0);
    }
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        match file.read_at(&mut bytes[len..], len as u64) {
            Ok(n) if len + n < bytes.len() => {
                len += n;
                break;
            }
            Ok(n) => len += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    String::from_utf8(bytes[..len].to_vec())
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// Whether `file` lives on a filesystem that generates it at each read.
fn is_virtual(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|stat| VIRTUAL.contains(&(stat.f_type as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The characters this process has read so far (`/proc/self/io`).
    fn characters_read(text: &str) -> u64 {
        let line = text.lines().find(|l| l.starts_with("rchar:")).unwrap();
        line["rchar:".len()..].trim().parse().unwrap()
    }

    #[test]
    fn a_proc_file_is_kept_and_read_afresh_each_time() {
        let files = KeptFiles::new(8);
        let path = Path::new("/proc/thread-self/io");
        let first = characters_read(&files.read(path).unwrap());
        assert_eq!(files.len(), 1, "a procfs file is kept");
        let second = characters_read(&files.read(path).unwrap());
        assert!(
            second > first,
            "the kept file's text is the kernel's of now: {first} then {second}"
        );
        assert_eq!(files.len(), 1, "the same descriptor serves");
    }

    #[test]
    fn a_regular_file_is_opened_for_each_read_so_a_replacement_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.stat");
        std::fs::write(&path, "total_rss 1\n").unwrap();
        let files = KeptFiles::new(8);
        assert_eq!(files.read(&path).unwrap(), "total_rss 1\n");
        assert!(files.is_empty(), "a regular file is not kept");
        let temp = dir.path().join("next");
        std::fs::write(&temp, "total_rss 2\n").unwrap();
        std::fs::rename(&temp, &path).unwrap();
        assert_eq!(files.read(&path).unwrap(), "total_rss 2\n");
    }

    #[test]
    fn a_sweep_closes_what_was_not_read_since_the_last() {
        let files = KeptFiles::new(8);
        let (io, stat) = (Path::new("/proc/self/io"), Path::new("/proc/self/stat"));
        files.read(io).unwrap();
        files.read(stat).unwrap();
        files.sweep();
        assert_eq!(files.len(), 2, "both were read before the sweep");
        files.read(io).unwrap();
        files.sweep();
        assert_eq!(files.len(), 1, "only the file read this cycle stays");
    }

    #[test]
    fn past_its_capacity_a_file_is_read_but_not_kept() {
        let files = KeptFiles::new(1);
        files.read(Path::new("/proc/self/io")).unwrap();
        let stat = files.read(Path::new("/proc/self/stat")).unwrap();
        assert!(!stat.is_empty());
        assert_eq!(files.len(), 1);
    }

    #[test]
    fn a_removed_cgroups_file_is_closed_and_its_absence_told() {
        // A cgroup of this machine's v1 pids controller, made for the test
        // (the suite runs as root, as the agent does).
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/pids/vigil-kept-{}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).expect("a v1 pids cgroup can be made (root, v1 pids mounted)");
        let path = dir.join("pids.current");
        let files = KeptFiles::new(8);
        assert_eq!(files.read(&path).unwrap().trim(), "0");
        assert_eq!(files.len(), 1, "a cgroup file is kept");
        std::fs::remove_dir(&dir).unwrap();
        let error = files.read(&path).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
        assert!(files.is_empty(), "the removed cgroup's file is closed");
    }

    #[test]
    fn a_text_longer_than_the_buffer_is_read_whole_and_bytes_not_utf8_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (long, binary) = (dir.path().join("long"), dir.path().join("binary"));
        let text = "x".repeat(10_000);
        std::fs::write(&long, &text).unwrap();
        std::fs::write(&binary, [0xff, 0xfe]).unwrap();
        let files = KeptFiles::new(8);
        assert_eq!(files.read(&long).unwrap(), text);
        std::fs::write(&long, "short").unwrap();
        assert_eq!(
            files.read(&long).unwrap(),
            "short",
            "a grown buffer reads less"
        );
        let error = files.read(&binary).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_missing_file_is_an_error_and_nothing_is_kept() {
        let files = KeptFiles::new(8);
        let error = files
            .read(Path::new("/proc/self/no-such-file"))
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(files.is_empty());
    }
}
