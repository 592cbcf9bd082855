//! Output files a root tool can write safely into directories other users can write to.
//!
//! A file is written under a temporary name created with `O_CREAT|O_EXCL|O_NOFOLLOW` in a
//! directory opened once (and checked: a directory owned by root, by us or by the sudo user, and
//! not writable by others unless sticky like `/tmp`), then renamed over its final name with
//! `renameat`. A final name that exists must be a regular file owned by root, by us or by the sudo
//! user: a symbolic link or another user's file is refused. Under `sudo`, what was created is
//! handed to the invoking user through its descriptor (`fchown`). A crash or a full disk leaves at
//! most a hidden `.NAME.PID.N.tmp` file, never half an output under its final name.
//!
//! Missing directories of the output path are created (mode 0755, owned like the outputs).
//! Symbolic links on the way to the directory are followed only if root, we or the sudo user own
//! them (what `fs.protected_symlinks` enforces for sticky directories).
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

#[cfg(unix)]
mod unix;

/// Why an output path was refused.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    #[error("{} is a symbolic link owned by uid {uid} (not by root or you): refusing to follow it; choose another -o", path.display())]
    ForeignLink { path: PathBuf, uid: u32 },
    #[error("{} is a symbolic link: refusing to replace it; remove it or choose another -o", path.display())]
    FinalLink { path: PathBuf },
    #[error("{} is not a regular file: refusing to replace it; choose another -o", path.display())]
    NotRegular { path: PathBuf },
    #[error("{} belongs to uid {uid} (not to root or you): refusing to replace it; choose another -o", path.display())]
    ForeignFile { path: PathBuf, uid: u32 },
    #[error("directory {} belongs to uid {uid} (not to root or you): choose a directory you own for -o", path.display())]
    ForeignDir { path: PathBuf, uid: u32 },
    #[error("directory {} is writable by others and not sticky: choose a directory you own for -o", path.display())]
    OpenDir { path: PathBuf },
    #[error("{} is not a directory: choose another -o", path.display())]
    NotDir { path: PathBuf },
    #[error("{} has too many symbolic links to resolve", path.display())]
    LinkLoop { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, #[source] source: io::Error },
}

/// A checked output directory, held open: files are created and renamed relative to it.
#[derive(Debug)]
pub struct OutputDir {
    path: PathBuf,
    #[cfg(unix)]
    inner: unix::Dir,
}

/// A file being written under a temporary name; [`PendingFile::commit`] renames it to its
/// final name. Dropped without a commit, the temporary file is removed.
#[derive(Debug)]
pub struct PendingFile<'a> {
    dir: &'a OutputDir,
    file: Option<File>,
    tmp: OsString,
    name: OsString,
}

impl OutputDir {
    /// Opens the directory `dir` (created if missing; `""` is the current directory), checked.
    pub fn open(dir: &Path) -> Result<Self, SafeFileError> {
        let path = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir.to_path_buf() };
        #[cfg(unix)]
        {
            let inner = unix::Dir::open(&path)?;
            Ok(OutputDir { path, inner })
        }
        #[cfg(not(unix))]
        {
            std::fs::create_dir_all(&path).map_err(|source| SafeFileError::Io { path: path.clone(), source })?;
            Ok(OutputDir { path })
        }
    }

    /// The directory holding `path` (an output file or prefix), opened as [`OutputDir::open`].
    pub fn of(path: &Path) -> Result<Self, SafeFileError> {
        Self::open(path.parent().unwrap_or(Path::new("")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes hidden temporary files (`.NAME.PID.N.tmp`, NAME starting with `base`) that a
    /// clrprobe killed while writing left here: only regular files of root, us or the sudo
    /// user, whose PID is no running clrprobe. Returns the names removed.
    pub fn remove_stale_temps(&self, base: &std::ffi::OsStr) -> Vec<std::ffi::OsString> {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            self.inner.remove_stale_temps(&self.path, base.as_bytes())
        }
        #[cfg(not(unix))]
        {
            let _ = base;
            Vec::new()
        }
    }

    /// Starts writing `name` (a file name, no directory): checks what is there now and creates
    /// the temporary file.
    pub fn create(&self, name: &std::ffi::OsStr) -> Result<PendingFile<'_>, SafeFileError> {
        let final_path = self.path.join(name);
        #[cfg(unix)]
        {
            self.inner.check_final(name, &final_path)?;
            let (file, tmp) = self.inner.create_temp(name, &final_path)?;
            Ok(PendingFile { dir: self, file: Some(file), tmp, name: name.to_owned() })
        }
        #[cfg(not(unix))]
        {
            let file = File::create(&final_path).map_err(|source| SafeFileError::Io { path: final_path.clone(), source })?;
            Ok(PendingFile { dir: self, file: Some(file), tmp: name.to_owned(), name: name.to_owned() })
        }
    }
}

impl PendingFile<'_> {
    /// The final path.
    pub fn path(&self) -> PathBuf {
        self.dir.path.join(&self.name)
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("not committed yet")
    }

    /// Takes the file out (to hand to another thread); give it back with [`PendingFile::commit_with`].
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("not taken yet")
    }

    /// Flushes the file to disk, hands it to the sudo user, and renames it to its final name.
    pub fn commit(mut self) -> Result<(), SafeFileError> {
        let file = self.file.take().expect("not committed yet");
        self.commit_with(file)
    }

    /// [`PendingFile::commit`] with the file taken out by [`PendingFile::take_file`].
    pub fn commit_with(mut self, file: File) -> Result<(), SafeFileError> {
        let path = self.path();
        let io = |source| SafeFileError::Io { path: path.clone(), source };
        file.sync_all().map_err(io)?;
        #[cfg(unix)]
        {
            unix::chown_to_sudo_user(&file).map_err(io)?;
            drop(file);
            self.dir.inner.check_final(&self.name, &path)?;
            self.dir.inner.rename(&self.tmp, &self.name).map_err(io)?;
        }
        #[cfg(not(unix))]
        drop(file);
        self.tmp.clear(); // committed: nothing to remove on drop
        Ok(())
    }
}

impl Drop for PendingFile<'_> {
    fn drop(&mut self) {
        #[cfg(unix)]
        if !self.tmp.is_empty() {
            self.dir.inner.unlink(&self.tmp);
        }
    }
}

/// Writes `path` safely (see the module docs): `body` writes through a buffer; every failure,
/// including the final flush, leaves no file under `path`.
pub fn write_file<F>(path: &Path, body: F) -> Result<(), SafeFileError>
where
    F: FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
{
    let name = path.file_name().ok_or_else(|| SafeFileError::NotRegular { path: path.to_path_buf() })?;
    let dir = OutputDir::of(path)?;
    let mut pending = dir.create(name)?;
    let io = |source| SafeFileError::Io { path: path.to_path_buf(), source };
    {
        let mut w = BufWriter::with_capacity(256 * 1024, pending.file());
        body(&mut w).map_err(io)?;
        w.flush().map_err(io)?;
    }
    pending.commit()
}
