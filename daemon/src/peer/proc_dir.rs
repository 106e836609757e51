//! An open `/proc/<pid>` directory: what is read through it is that process's own, even once
//! its pid is another's (a pid is reused once its process is gone).

use rustix::fs::{Access, AtFlags, Mode, OFlags};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

/// Room for a whole environment at once: each read of another process's memory looks its
/// pages up again.
const ROOM: usize = 32 * 1024;

#[derive(Debug)]
pub(super) struct ProcDir(OwnedFd);

impl ProcDir {
    pub fn open(pid: u32) -> Option<ProcDir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::open(format!("/proc/{pid}"), flags, Mode::empty())
            .ok()
            .map(ProcDir)
    }

    /// Whether the process's descriptor `fd` is `link` (`socket:[inode]`): one readlinkat,
    /// into a buffer on the stack, which fails once the process is gone.
    pub fn holds(&self, fd: i32, link: &str) -> bool {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        match rustix::fs::readlinkat_raw(&self.0, format!("fd/{fd}"), &mut buf) {
            Ok((target, _)) => target == link.as_bytes(),
            Err(_) => false,
        }
    }

    /// One of its files (`environ`, `stat`), read whole.
    pub fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.0, name, flags, Mode::empty())?;
        // Read into the room as it is, not zeroed first: most of it is never written. A read
        // that leaves room over has it all (`environ` is copied until the buffer or the block
        // ends; `stat` is one short line).
        let mut out = Vec::<u8>::with_capacity(ROOM);
        let n = rustix::io::read(&fd, rustix::buffer::spare_capacity(&mut out))?;
        if n == ROOM {
            std::fs::File::from(fd).read_to_end(&mut out)?;
        }
        Ok(out)
    }

    /// The user that owns the process.
    pub fn owner(&self) -> Option<u32> {
        rustix::fs::fstat(&self.0).ok().map(|stat| stat.st_uid)
    }

    /// Whether the process is still there (its `fd` directory goes with it).
    pub fn alive(&self) -> bool {
        rustix::fs::accessat(&self.0, "fd", Access::EXISTS, AtFlags::empty()).is_ok()
    }
}

/// This user's id, as `/proc/self` is owned.
pub(super) fn own_uid() -> std::io::Result<u32> {
    std::fs::metadata("/proc/self").map(|m| m.uid())
}
