//! Small filesystem helpers: optional reads, private directories, and
//! crash-safe writes that either replace a file or refuse to clobber one.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// Mode of files holding secrets (private keys, tokens, kubeconfigs).
pub(crate) const SECRET_MODE: u32 = 0o600;
/// Mode of files holding public material (certificates).
pub(crate) const PUBLIC_MODE: u32 = 0o644;

fn io_error(action: &'static str, path: &Path, source: io::Error) -> Error {
    Error::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Reads `path`, returning `None` if it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("read", path, e)),
    }
}

/// Reads `path`, which must exist.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Error> {
    fs::read(path).map_err(|e| io_error("read", path, e))
}

/// Creates `dir` and its missing parents; new directories get mode 0700.
/// An existing directory is left as it is.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), Error> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_error("create the directory", dir, e))
}

/// Writes `contents` to a fresh temporary file next to `path`, with `mode`,
/// flushed to disk. Returns the temporary file's path.
fn write_temp(path: &Path, contents: &[u8], mode: u32) -> Result<PathBuf, Error> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    loop {
        let tmp = dir.join(format!(
            ".{name}.tmp.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
        {
            Ok(file) => file,
            // A leftover from a crashed process with a recycled pid: try the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error("create", &tmp, e)),
        };
        // Set the mode explicitly: the one given to `open` is filtered by the umask.
        let written = file
            .set_permissions(Permissions::from_mode(mode))
            .and_then(|()| file.write_all(contents))
            .and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("write", &tmp, e));
        }
        return Ok(tmp);
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Best effort: makes a rename or link in `dir` durable.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Atomically replaces (or creates) `path` with `contents` and `mode`:
/// readers see either the old file or the complete new one.
pub(crate) fn replace(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    let tmp = write_temp(path, contents, mode)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_error("write", path, e));
    }
    sync_dir(parent_dir(path));
    Ok(())
}

/// Creates `path` with `contents` and `mode` unless it already exists.
/// Returns `false` (and leaves the existing file untouched) if it does.
/// The file appears complete or not at all.
pub(crate) fn create_no_clobber(path: &Path, contents: &[u8], mode: u32) -> Result<bool, Error> {
    let tmp = write_temp(path, contents, mode)?;
    // A hard link fails if the target exists, unlike rename.
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(parent_dir(path));
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        // Filesystems without hard links: fall back to an exclusive create,
        // which still never clobbers but could leave a partial file on a crash.
        Err(_) => {
            let mut file = match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(path)
            {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(io_error("create", path, e)),
            };
            file.set_permissions(Permissions::from_mode(mode))
                .and_then(|()| file.write_all(contents))
                .and_then(|()| file.sync_all())
                .map_err(|e| io_error("write", path, e))?;
            sync_dir(parent_dir(path));
            Ok(true)
        }
    }
}
