//! The `audit-writer` task: takes events from the queue and writes each as one JSON line —
//! appended to `[audit] file`, or as an `info` event of the `audit` log target. What is
//! queued is written and flushed every 20 ms (a tick, not a wake-up per event: the hot path only
//! queues), so a reader of the file sees every event soon after it happened. On shutdown what is still queued is written.
//!
//! A file that cannot be opened (or written) is reported once, and the events go to the log
//! target meanwhile; a reopen (a reload's event asks for one) tries the file again.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Event;

/// How often the queue is drained into the file (or log) and flushed.
const TICK: std::time::Duration = std::time::Duration::from_millis(20);

pub(super) struct Writer {
    path: Option<PathBuf>,
    file: Option<BufWriter<File>>,
    events: mpsc::Receiver<Event>,
}

impl Writer {
    pub(super) fn new(path: Option<PathBuf>, events: mpsc::Receiver<Event>) -> Writer {
        let mut writer = Writer { path, file: None, events };
        writer.open();
        writer
    }

    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        // Woken on a tick, not per event: a host's request never wakes the writer, and one write
        // and flush carries every event of the tick.
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => if !self.drain() { break },
                () = shutdown.cancelled() => break,
            }
        }
        self.events.close();
        self.drain();
    }

    /// Write whatever is queued, then flush; false once the queue is closed and empty.
    fn drain(&mut self) -> bool {
        let open = loop {
            match self.events.try_recv() {
                Ok(event) => self.write(&event),
                Err(mpsc::error::TryRecvError::Empty) => break true,
                Err(mpsc::error::TryRecvError::Disconnected) => break false,
            }
        };
        self.flush();
        open
    }

    fn write(&mut self, event: &Event) {
        if event.reopen_first {
            self.open();
        }
        let line = match serde_json::to_string(event) {
            Ok(line) => line,
            Err(error) => return tracing::error!(error = %error, "an audit event could not be written as JSON"),
        };
        if let Some(file) = &mut self.file {
            if writeln!(file, "{line}").is_ok() {
                return;
            }
            tracing::error!(path = ?self.path, "the audit file cannot be written; audit events go to the log until it is reopened");
            self.file = None;
        }
        tracing::info!(target: "audit", "{line}");
    }

    fn flush(&mut self) {
        if let Some(file) = &mut self.file
            && file.flush().is_err()
        {
            tracing::error!(path = ?self.path, "the audit file cannot be written; audit events go to the log until it is reopened");
            self.file = None;
        }
    }

    /// (Re)open the file for appending (nothing to do without one).
    fn open(&mut self) {
        self.flush();
        let Some(path) = &self.path else { return };
        match OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => self.file = Some(BufWriter::new(file)),
            Err(error) => {
                tracing::error!(path = %path.display(), error = %error, "cannot open the audit file; audit events go to the log");
                self.file = None;
            }
        }
    }
}
