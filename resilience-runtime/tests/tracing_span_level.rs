//! The call spans' level: `DEBUG` by default, so a subscriber at `INFO` (as
//! `RUST_LOG=info`) sees none of them, and `call_span::set_level` raises them to
//! `INFO` or lowers them to `TRACE`. One test (the level is the process's), under
//! `tracing-subscriber`'s own formatter.

use resilience_runtime::{call_span, downgrade, Downgraded};
use std::io;
use std::sync::{Arc, Mutex};
use tracing::Level;
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[downgrade(point = "span_level.call")]
fn call() -> Result<u32, Downgraded> {
    tracing::info!("inside the body");
    Ok(7)
}

/// Whether one call under a subscriber that shows up to `max` wrote a call span.
fn span_shown_at(max: Level) -> bool {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_max_level(max)
        .finish();
    tracing::subscriber::with_default(subscriber, || assert_eq!(call(), Ok(7)));
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("inside the body"), "{text}");
    text.contains("resilience.call{point=\"span_level.call\"")
}

#[test]
fn the_call_span_is_debug_unless_raised_or_lowered() {
    assert_eq!(call_span::level(), Level::DEBUG, "the default");
    assert!(!span_shown_at(Level::INFO), "quiet at RUST_LOG=info");
    assert!(span_shown_at(Level::DEBUG));

    call_span::set_level(Level::INFO);
    assert_eq!(call_span::level(), Level::INFO);
    assert!(span_shown_at(Level::INFO), "raised to INFO");

    call_span::set_level(Level::TRACE);
    assert_eq!(call_span::level(), Level::TRACE);
    assert!(!span_shown_at(Level::DEBUG), "lowered below DEBUG");
    assert!(span_shown_at(Level::TRACE));

    // A warning is no level for a call: taken as INFO.
    call_span::set_level(Level::WARN);
    assert_eq!(call_span::level(), Level::INFO);
    call_span::set_level(Level::DEBUG);
}
