//! Flame graph SVG, drawn by the `inferno` crate from the folded lines.

use std::io::{self, Write};
use std::path::Path;

use inferno::flamegraph::color::MultiPalette;
use inferno::flamegraph::{self, Options, Palette};

use crate::error::ProfileError;
use crate::folded::{self, FoldedOptions};
use crate::model::Profile;
use crate::output;

/// The folded lines and inferno options for sample type `index` (validated up front, so no
/// file is created for a bad index).
fn prepare(p: &Profile, index: usize, title: &str) -> Result<(Options<'static>, Vec<String>), ProfileError> {
    // Kind suffixes drive the `java` palette (kernel orange, managed green, native red).
    let mut lines = folded::lines(p, index, &FoldedOptions::default())?;
    if lines.is_empty() {
        // inferno refuses empty input; draw a placeholder so the file still opens.
        lines.push("[no samples] 1".to_owned());
    }
    let mut opts = Options::default();
    opts.title = title.to_owned();
    opts.count_name = p.sample_types()[index].unit.clone();
    opts.colors = Palette::Multi(MultiPalette::Java);
    opts.deterministic = true;
    Ok((opts, lines))
}

fn render<W: Write>(mut opts: Options<'_>, lines: &[String], w: &mut W) -> io::Result<()> {
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
}

/// Draw the flame graph of sample type `index` into a stream.
pub fn to_writer<W: Write>(p: &Profile, index: usize, title: &str, w: W) -> Result<(), ProfileError> {
    let (opts, lines) = prepare(p, index, title)?;
    output::to_stream("svg", w, |w| render(opts, &lines, w))
}

/// Draw the flame graph of sample type `index` into `path`.
pub fn write_file(p: &Profile, index: usize, title: &str, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let (opts, lines) = prepare(p, index, title)?;
    output::write_file(path.as_ref(), |w| render(opts, &lines, w))
}
