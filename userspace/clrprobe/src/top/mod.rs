//! `clrprobe top`: a live terminal view refreshed each second — leaf frames by CPU, allocation
//! rate by type, exceptions per second by type, contention — over one .NET process or all of
//! them. Quits on `q`, Esc or Ctrl-C (also SIGINT/SIGTERM from outside) and restores the
//! terminal; everything switched on in the targets is switched off again.
mod view;
mod watch;

pub use watch::{Row, Snapshot, Watch, WatchError};

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// Runs the view until quit, the duration ends, or the watched process exits.
pub fn run(cmd: &crate::cli::TopCmd) -> Result<(), TopError> {
    let stop = crate::signals::stop_flag();
    let mut watch = Watch::start(if cmd.all { None } else { cmd.pid }, cmd.freq, stop)?;
    let mut terminal = ratatui::init();
    // Log lines would land on the screen: the view shows the sources' warnings instead, and
    // they are printed after it quits.
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Error.min(level));
    let started = Instant::now();
    // The first tick comes after a full second: rates over a shorter span would jump.
    let mut snap = Snapshot { pids: watch.pids().to_vec(), ..Default::default() };
    let mut next = Instant::now() + Duration::from_secs(1);
    let result = loop {
        if let Err(e) = terminal.draw(|f| view::draw(f, &snap)) {
            break Err(e);
        }
        let quit = match event::poll(Duration::from_millis(100)) {
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
                }
                Ok(_) => false,
                Err(e) => break Err(e),
            },
            Ok(false) => false,
            Err(e) => break Err(e),
        };
        if quit
            || stop.load(Ordering::SeqCst)
            || cmd.duration.is_some_and(|d| started.elapsed() >= d)
            || watch.all_exited()
        {
            break Ok(());
        }
        if Instant::now() >= next {
            snap = watch.tick(cmd.rows);
            next += Duration::from_secs(1);
        }
    };
    ratatui::restore();
    log::set_max_level(level);
    for w in watch.finish() {
        eprintln!("clrprobe: warning: {w}");
    }
    result.map_err(TopError::from)
}
