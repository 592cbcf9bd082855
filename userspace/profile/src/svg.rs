//! Flame graph SVG, drawn by the `inferno` crate from the folded lines, each frame coloured by
//! what its code is, with a legend under the title:
//!
//! | category | colour | frames |
//! |---|---|---|
//! | JIT | green | managed code compiled by the JIT (and interpreted) |
//! | ReadyToRun | blue | precompiled managed code |
//! | native | red | named native code (libcoreclr, libc, ...) |
//! | native unknown | grey | code nothing could name (`libcoreclr.so+0x…`, bare addresses) |
//! | kernel | orange | kernel code |
//! | GC | purple | the collector (`WKS::`/`SVR::` gc functions, the `Garbage Collector` root) |
//!
//! Other made-up frames (thread roots, exception and allocation type leaves) are light grey.

use std::io::{self, Write};
use std::path::Path;

use inferno::flamegraph::color::{Color, MultiPalette, PaletteMap};
use inferno::flamegraph::{self, Options, Palette};

use crate::error::ProfileError;
use crate::folded::{self, FoldedOptions};
use crate::model::{Frame, FrameKind, Profile};
use crate::output;

/// A frame's colour category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Jit,
    ReadyToRun,
    Native,
    NativeUnknown,
    Kernel,
    Gc,
    Other,
}

impl Category {
    /// The legend, in order.
    pub const LEGEND: [Category; 6] =
        [Category::Jit, Category::ReadyToRun, Category::Native, Category::NativeUnknown, Category::Kernel, Category::Gc];

    pub fn of(f: &Frame) -> Category {
        if f.is_gc() {
            return Category::Gc;
        }
        if f.is_unnamed() && f.kind != FrameKind::Kernel {
            return Category::NativeUnknown;
        }
        match f.kind {
            FrameKind::Jit | FrameKind::Interpreted => Category::Jit,
            FrameKind::ReadyToRun => Category::ReadyToRun,
            FrameKind::Native => Category::Native,
            FrameKind::Unknown => Category::NativeUnknown,
            FrameKind::Kernel => Category::Kernel,
            FrameKind::Synthetic => Category::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Category::Jit => "JIT",
            Category::ReadyToRun => "ReadyToRun",
            Category::Native => "native",
            Category::NativeUnknown => "native unknown",
            Category::Kernel => "kernel",
            Category::Gc => "GC",
            Category::Other => "other",
        }
    }

    /// Fill colour as `#rrggbb`.
    pub fn color(self) -> &'static str {
        match self {
            Category::Jit => "#5cc85c",
            Category::ReadyToRun => "#5aa0e6",
            Category::Native => "#e6604e",
            Category::NativeUnknown => "#a8a8a8",
            Category::Kernel => "#f0a030",
            Category::Gc => "#b678e0",
            Category::Other => "#dcdcdc",
        }
    }

    fn rgb(self) -> Color {
        let hex = &self.color()[1..];
        let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
        Color { r: c(0), g: c(2), b: c(4) }
    }
}

/// The folded lines, the colour of each frame label and the inferno options for sample type
/// `index` (validated up front, so no file is created for a bad index).
fn prepare(p: &Profile, index: usize, title: &str) -> Result<(Options<'static>, Vec<String>, PaletteMap), ProfileError> {
    let fopts = FoldedOptions::default();
    let mut lines = folded::lines(p, index, &fopts)?;
    if lines.is_empty() {
        // inferno refuses empty input; draw a placeholder so the file still opens.
        lines.push("[no samples] 1".to_owned());
    }
    let mut colors = PaletteMap::default();
    for f in p.frames() {
        let label = folded::frame_label(f, &fopts);
        if colors.get(&label).is_none() {
            colors.insert(label, Category::of(f).rgb());
        }
    }
    colors.insert("[no samples]", Category::Other.rgb());
    let mut opts = Options::default();
    opts.title = title.to_owned();
    // Room under the title for the legend.
    opts.subtitle = Some(" ".to_owned());
    opts.count_name = p.sample_types()[index].unit.clone();
    // Only for labels missing from the map (none in practice).
    opts.colors = Palette::Multi(MultiPalette::Java);
    opts.deterministic = true;
    Ok((opts, lines, colors))
}

/// The legend: a swatch and a name per category, left-aligned on the subtitle's line.
fn legend(font_size: usize) -> String {
    let y = font_size * 2 + 4;
    let mut out = String::from("<g id=\"clrprobe-legend\">");
    let mut x = 10usize;
    for c in Category::LEGEND {
        out.push_str(&format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"{font_size}\" height=\"{font_size}\" fill=\"{}\" rx=\"2\" ry=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>",
            y,
            c.color(),
            x + font_size + 4,
            y + font_size - 2,
            c.label()
        ));
        x += font_size + 12 + c.label().len() * font_size * 6 / 10;
    }
    out.push_str("</g>");
    out
}

fn render<'a, W: Write>(mut opts: Options<'a>, lines: &[String], colors: &'a mut PaletteMap, w: &mut W) -> io::Result<()> {
    let font_size = opts.font_size;
    opts.palette_map = Some(colors);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)?;
    let text = String::from_utf8_lossy(&svg);
    match text.rfind("</svg>") {
        Some(end) => {
            w.write_all(text[..end].as_bytes())?;
            w.write_all(legend(font_size).as_bytes())?;
            w.write_all(text[end..].as_bytes())
        }
        None => w.write_all(&svg),
    }
}

/// Draw the flame graph of sample type `index` into a stream.
pub fn to_writer<W: Write>(p: &Profile, index: usize, title: &str, w: W) -> Result<(), ProfileError> {
    let (opts, lines, mut colors) = prepare(p, index, title)?;
    output::to_stream("svg", w, |w| render(opts, &lines, &mut colors, w))
}

/// Draw the flame graph of sample type `index` into `path`.
pub fn write_file(p: &Profile, index: usize, title: &str, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let (opts, lines, mut colors) = prepare(p, index, title)?;
    output::write_file(path.as_ref(), |w| render(opts, &lines, &mut colors, w))
}
