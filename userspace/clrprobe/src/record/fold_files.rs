//! Per-process files of a long host-wide recording (`record --all`): each recorded (.NET)
//! process's `PREFIX.PID.*.pb.gz` files are written when the process is folded (see [`super::retire`]),
//! on one background thread, with its samples at their times. The host profile then keeps
//! only its totals, and the end of the recording writes only the files of processes still
//! running (thousands of files after an hour were most of the time `--all` took to stop).
use std::{
    path::PathBuf,
    sync::mpsc,
    time::{Duration, Instant},
};

use clrprobe_profile::{Profile, ProfileError};

use crate::{formats::Format, output::Written};

/// Files of folded processes being written; what was written so far.
pub(crate) struct FoldFiles {
    prefix: PathBuf,
    tx: Option<mpsc::SyncSender<(u32, Profile)>>,
    /// The files written for each profile handed over.
    results: mpsc::Receiver<Vec<Written>>,
    /// Pids handed to the writer (their files are not written again at the end).
    pub pids: Vec<u32>,
    /// Results received so far: every failure, the first [`LISTED`] files written.
    written: Vec<Written>,
    /// Files written beyond those listed (counted, not kept: an hour makes thousands).
    pub more: usize,
    pending: usize,
}

/// Files of folded processes listed by path in the end (the rest are counted).
const LISTED: usize = 100;

/// Profiles waiting for the writer (more: the fold waits for room, up to a second).
const QUEUE: usize = 64;

impl FoldFiles {
    pub fn start(prefix: PathBuf) -> Self {
        let (tx, rx) = mpsc::sync_channel::<(u32, Profile)>(QUEUE);
        let (done, results) = mpsc::channel();
        let base = prefix.clone();
        let spawned = std::thread::Builder::new().name("fold-files".into()).spawn(move || {
            for (pid, p) in rx {
                let prefix = PathBuf::from(format!("{}.{pid}", base.display()));
                if done.send(crate::output::write_all(&p, &prefix, &[Format::Pprof])).is_err() {
                    return;
                }
            }
        });
        Self { prefix, tx: spawned.is_ok().then_some(tx), results, pids: Vec::new(), written: Vec::new(), more: 0, pending: 0 }
    }

    fn path(&self, pid: u32) -> PathBuf {
        PathBuf::from(format!("{}.{pid}", self.prefix.display()))
    }

    /// Hands `profile` (the samples of `pid`) to the writer.
    pub fn send(&mut self, pid: u32, profile: Profile) {
        self.collect();
        let Some(tx) = &self.tx else {
            // No writer thread: written at the end with the others.
            return;
        };
        let mut item = (pid, profile);
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match tx.try_send(item) {
                Ok(()) => {
                    self.pids.push(pid);
                    self.pending += 1;
                    return;
                }
                Err(mpsc::TrySendError::Full(back)) if Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => {
                    self.pids.push(pid);
                    let source = std::io::Error::other("the writer of per-process files fell behind");
                    self.written.push(Written { path: self.path(pid), result: Err(ProfileError::Write { path: self.path(pid), source }) });
                    return;
                }
            }
        }
    }

    /// Takes the results of files written so far.
    fn collect(&mut self) {
        while let Ok(w) = self.results.try_recv() {
            self.pending = self.pending.saturating_sub(1);
            self.keep(w);
        }
    }

    fn keep(&mut self, w: Vec<Written>) {
        for w in w {
            if w.result.is_ok() && self.written.len() >= LISTED {
                self.more += 1;
            } else {
                self.written.push(w);
            }
        }
    }

    /// Waits for the files in flight until `deadline`; returns the results kept (every
    /// failure, the first files written), the pids handled (their files are not written
    /// again) and how many more files were written.
    pub fn finish(mut self, deadline: Instant) -> (Vec<Written>, Vec<u32>, usize) {
        self.tx = None;
        self.collect();
        while self.pending > 0 {
            match self.results.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(w) => {
                    self.pending -= 1;
                    self.keep(w);
                }
                Err(_) => break,
            }
        }
        if self.pending > 0 {
            let source = std::io::Error::other(format!("{} per-process files of exited processes were not written in time", self.pending));
            self.written.push(Written { path: self.prefix.clone(), result: Err(ProfileError::Write { path: self.prefix.clone(), source }) });
        }
        (self.written, self.pids, self.more)
    }
}
