//! Drawing a [`Snapshot`] with ratatui: header lines (rates, contention), then three tables
//! stacked (CPU, allocations, exceptions).
use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Cell, Paragraph, Row as TRow, Table},
};

use super::watch::{Row, Snapshot};

fn table<'a>(title: &'a str, unit: &'a str, total_unit: &'a str, rows: &'a [Row], fmt: fn(f64) -> String) -> Table<'a> {
    let header = TRow::new([Cell::from(unit), Cell::from(total_unit), Cell::from("name")]).style(Style::default().add_modifier(Modifier::BOLD));
    let body = rows.iter().map(|r| TRow::new([Cell::from(fmt(r.per_sec)), Cell::from(fmt(r.total)), Cell::from(r.name.as_str())]));
    Table::new(body, [Constraint::Length(12), Constraint::Length(12), Constraint::Min(20)])
        .header(header)
        .block(Block::default().borders(Borders::ALL).title(title))
}

fn count(v: f64) -> String {
    format!("{v:.1}")
}

fn bytes(v: f64) -> String {
    if v >= 1024.0 * 1024.0 { format!("{:.1} MB", v / (1024.0 * 1024.0)) } else { format!("{:.1} KB", v / 1024.0) }
}

pub fn draw(f: &mut Frame, s: &Snapshot) {
    let [head, body] = Layout::vertical([Constraint::Length(3), Constraint::Fill(1)]).areas(f.area());
    let pids: Vec<String> = s.pids.iter().map(u32::to_string).collect();
    let mut lines = vec![Line::from(format!(
        "clrprobe top  {:.0} s  pids {}  samples/s {:.0}  (q: quit)",
        s.elapsed_s,
        pids.join(","),
        s.samples_per_sec
    ))];
    lines.push(Line::from(format!(
        "contention: {:.1} waits/s, {:.1} ms waited/s, p99 {:.2} ms, {} waits in all",
        s.contention_waits_per_sec, s.contention_ms_per_sec, s.contention_p99_ms, s.contention_waits
    )));
    if let Some(w) = s.warnings.last() {
        lines.push(Line::from(format!("warning: {w}")));
    }
    f.render_widget(Paragraph::new(lines), head);
    let [cpu, alloc, exc] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1), Constraint::Fill(1)]).areas(body);
    f.render_widget(table("CPU: leaf frames", "samples/s", "samples", &s.cpu, count), cpu);
    f.render_widget(table("Allocations by type", "bytes/s", "bytes", &s.alloc, bytes), alloc);
    f.render_widget(table("Exceptions by type", "per s", "total", &s.exceptions, count), exc);
}
