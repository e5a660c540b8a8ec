//! Files that reload themselves: the gateway watches every file its config was read from (the
//! config, `[rls] config`, the members and plans files, the JWT public key) and reloads as
//! `SIGHUP` does when what they hold changes.
//!
//! Differences from a watch on each file: the directories are watched, not the files. An
//! editor's save and Kubernetes' ConfigMap update both replace a file rather than write it (an
//! atomic rename; a ConfigMap renames its `..data` symlink and the file's own symlink never
//! changes), so a watch on the file's inode would miss them. What decides a reload is the
//! content read through every symlink, compared with what the last reload read, whatever
//! started it, so events that change nothing (another file of the directory, a touch, the
//! gateway's own reads, an edit a `SIGHUP` or `/admin/reload` already loaded) reload nothing.
//! The directories are worked out again after each burst of events and every second, so a file
//! replaced by a symlink to another directory, or a reload by signal that names other files, is
//! followed; the files are read again whenever the directories changed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{Config, FilesDigest};
use crate::state::GatewayState;

/// How long the files must stay quiet after an event before they are read (a save or a
/// ConfigMap swap is several events).
const QUIET: Duration = Duration::from_millis(150);
/// The longest a burst of events delays a reload.
const MOST_DELAY: Duration = Duration::from_secs(1);
/// How often the watched directories are worked out again with no event: a reload by `SIGHUP`
/// or `/admin/reload` may name new files, and a file may have become a symlink elsewhere.
const REFOLLOW: Duration = Duration::from_secs(1);

/// Watches the files of the config in force and reloads `state` when they change, until
/// dropped.
pub struct FileWatch {
    task: JoinHandle<()>,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching the files of `state`'s config in force; `None` (logged) when the system
/// cannot watch.
pub fn start(state: Arc<GatewayState>) -> Option<FileWatch> {
    let (events, changes) = mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reads (the gateway's own, of these very files) change nothing.
        if event.is_ok_and(|e| !matches!(e.kind, EventKind::Access(_))) {
            let _ = events.send(());
        }
    });
    let watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the config files; reload with SIGHUP");
            return None;
        }
    };
    let mut watching = Watching {
        watcher,
        dirs: BTreeSet::new(),
    };
    let config = state.table().config.clone();
    watching.follow(directories(&config));
    let task = tokio::spawn(watching.run(state, changes));
    Some(FileWatch { task })
}

/// The watcher and the directories it watches.
struct Watching {
    watcher: RecommendedWatcher,
    dirs: BTreeSet<PathBuf>,
}

impl Watching {
    /// Reloads after each quiet burst of events that left the files other than the last
    /// reload read them, and whenever the directories to watch changed (a file that became a
    /// symlink, a reload that named other files) and the files with them.
    async fn run(mut self, state: Arc<GatewayState>, mut changes: mpsc::UnboundedReceiver<()>) {
        let mut refollow = tokio::time::interval(REFOLLOW);
        refollow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let evented = tokio::select! {
                event = changes.recv() => match event {
                    Some(()) => {
                        settle(&mut changes).await;
                        true
                    }
                    None => return,
                },
                _ = refollow.tick() => false,
            };
            // Directories watched from now on may hold an edit made before: read them too.
            let moved = match directories_off_thread(state.table().config.clone()).await {
                Some(wanted) => self.follow(wanted),
                None => false,
            };
            if evented || moved {
                self.reload_if_changed(&state).await;
            }
        }
    }

    /// Reloads `state` when its files no longer read as the last reload read them.
    async fn reload_if_changed(&mut self, state: &Arc<GatewayState>) {
        let config = state.table().config.clone();
        if read_off_thread(config).await == state.files_loaded() {
            return;
        }
        tracing::info!("a config file changed; reloading");
        let reloading = state.clone();
        let _ = tokio::task::spawn_blocking(move || reloading.reload()).await;
        // The files named may have changed with the config.
        if let Some(wanted) = directories_off_thread(state.table().config.clone()).await {
            self.follow(wanted);
        }
    }

    /// Watches the `wanted` directories, and no others; whether they changed.
    fn follow(&mut self, wanted: BTreeSet<PathBuf>) -> bool {
        if wanted == self.dirs {
            return false;
        }
        for gone in self.dirs.difference(&wanted) {
            let _ = self.watcher.unwatch(gone);
        }
        for new in wanted.difference(&self.dirs) {
            if let Err(e) = self.watcher.watch(new, RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %new.display(), error = %e, "cannot watch a config directory");
            }
        }
        self.dirs = wanted;
        true
    }
}

/// Waits until no event came for [`QUIET`] (at most [`MOST_DELAY`]).
async fn settle(changes: &mut mpsc::UnboundedReceiver<()>) {
    let deadline = tokio::time::Instant::now() + MOST_DELAY;
    loop {
        let quiet_until = (tokio::time::Instant::now() + QUIET).min(deadline);
        match tokio::time::timeout_at(quiet_until, changes.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
            _ => return,
        }
    }
}

/// [`Config::files_digest`] on a blocking thread (the files may be large bitmaps).
async fn read_off_thread(config: Arc<Config>) -> FilesDigest {
    tokio::task::spawn_blocking(move || config.files_digest())
        .await
        .unwrap_or_default()
}

/// [`directories`] on a blocking thread (working them out reads the file system, every
/// second); `None` if that thread failed.
async fn directories_off_thread(config: Arc<Config>) -> Option<BTreeSet<PathBuf>> {
    tokio::task::spawn_blocking(move || directories(&config))
        .await
        .ok()
}

/// The directories to watch for `config`: each source's own (a file's parent, a directory
/// itself), and, where a source is a symlink, its target's, so that an edit made where the
/// link points is seen too.
fn directories(config: &Config) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    for source in config.sources() {
        let source = absolute(&source);
        if source.is_dir() {
            dirs.insert(source.clone());
        }
        dirs.extend(source.parent().map(Path::to_path_buf));
        if let Ok(target) = std::fs::canonicalize(&source) {
            let dir = match target.is_dir() {
                true => Some(target.clone()),
                false => target.parent().map(Path::to_path_buf),
            };
            dirs.extend(dir);
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs
}

/// `path` from the working directory when relative (`config.toml`'s directory is `.`).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
