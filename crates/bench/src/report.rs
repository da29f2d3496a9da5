//! The figures of one scenario: each with a value, a unit, and optionally the target it is held
//! to and whether it met it. Rendered as a Markdown table or as JSON. No IO.

use std::fmt::Write;
use std::time::Duration;

use serde_json::{Value, json};

/// One scenario's results.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: String,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    /// A preformatted Markdown table shown after the rows (e.g. the `matrix` scenario's grid).
    pub table: Option<String>,
    /// Set when the scenario could not run to the end.
    pub error: Option<String>,
}

/// One figure.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: String,
    pub value: f64,
    pub unit: Unit,
    pub target: Option<Target>,
}

/// How a value is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Micros,
    Seconds,
    Ratio,
    PerSecond,
    MiB,
    Bytes,
    Count,
}

/// What a figure is held to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Report {
    pub fn new(scenario: &str) -> Self {
        Self { scenario: scenario.to_owned(), rows: Vec::new(), notes: Vec::new(), table: None, error: None }
    }

    /// A scenario that stopped with `error`.
    pub fn failure(scenario: &str, error: &anyhow::Error) -> Self {
        eprintln!("{scenario} failed: {error:#}");
        Self { error: Some(format!("{error:#}")), ..Self::new(scenario) }
    }

    /// Add a figure without a target.
    pub fn add(&mut self, figure: impl Into<String>, value: f64, unit: Unit) {
        self.rows.push(Row { figure: figure.into(), value, unit, target: None });
    }

    /// Add a figure held to `target`.
    pub fn check(&mut self, figure: impl Into<String>, value: f64, unit: Unit, target: Target) {
        self.rows.push(Row { figure: figure.into(), value, unit, target: Some(target) });
    }

    /// Add a duration in milliseconds.
    pub fn millis(&mut self, figure: impl Into<String>, value: Duration) {
        self.add(figure, value.as_secs_f64() * 1e3, Unit::Millis);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    pub fn to_markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.scenario);
        if let Some(error) = &self.error {
            let _ = writeln!(out, "**failed:** {error}\n");
        }
        if !self.rows.is_empty() {
            out.push_str("| figure | value | target | met? |\n|---|---:|---|---|\n");
        }
        for row in &self.rows {
            let target = row.target.map(|t| t.describe(row.unit)).unwrap_or_default();
            let met = match row.met() {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            let _ = writeln!(out, "| {} | {} | {target} | {met} |", row.figure, row.unit.show(row.value));
        }
        if let Some(table) = &self.table {
            let _ = write!(out, "\n{table}");
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n- {note}");
        }
        out
    }

    fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "figure": row.figure,
                    "value": row.value,
                    "unit": row.unit.label(),
                    "target": row.target.map(|t| t.describe(row.unit)),
                    "met": row.met(),
                })
            })
            .collect();
        json!({"scenario": self.scenario, "rows": rows, "notes": self.notes, "error": self.error})
    }
}

/// Every report as one JSON document.
pub fn to_json(reports: &[Report]) -> String {
    let all: Vec<Value> = reports.iter().map(Report::to_json).collect();
    serde_json::to_string_pretty(&json!({ "scenarios": all })).unwrap_or_default()
}

impl Row {
    pub fn met(&self) -> Option<bool> {
        match self.target? {
            Target::AtMost(bound) => Some(self.value <= bound),
            Target::AtLeast(bound) => Some(self.value >= bound),
        }
    }
}

impl Target {
    fn describe(self, unit: Unit) -> String {
        match self {
            Target::AtMost(bound) => format!("≤ {}", unit.show(bound)),
            Target::AtLeast(bound) => format!("≥ {}", unit.show(bound)),
        }
    }
}

impl Unit {
    pub fn show(self, value: f64) -> String {
        match self {
            Unit::Millis => format!("{value:.3} ms"),
            Unit::Micros => format!("{value:.0} µs"),
            Unit::Seconds => format!("{value:.2} s"),
            Unit::Ratio => format!("{value:.2}×"),
            Unit::PerSecond => format!("{value:.0}/s"),
            Unit::MiB => format!("{value:.1} MiB"),
            Unit::Bytes => format!("{value:.0} B"),
            Unit::Count => format!("{value:.0}"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Micros => "us",
            Unit::Seconds => "s",
            Unit::Ratio => "ratio",
            Unit::PerSecond => "per_second",
            Unit::MiB => "MiB",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        }
    }
}
