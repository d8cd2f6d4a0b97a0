//! Medians, ratios, the markdown table and the JSON document.

use std::collections::BTreeMap;

use serde::Serialize;

/// Target names, in table column order.
pub(crate) const TARGETS: [&str; 3] = ["fuse", "tmpfs", "ext4"];
/// The optional fourth target (`--backup`): the mount with its database
/// shipped continuously.
pub(crate) const BACKUP_TARGET: &str = "fuse+backup";

/// Every measured duration: stage -> target -> seconds per repetition.
#[derive(Default)]
pub(crate) struct Samples {
    /// Stages in first-seen order.
    pub order: Vec<String>,
    pub data: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
}

impl Samples {
    pub(crate) fn add(&mut self, stage: &str, target: &str, secs: f64) {
        if !self.data.contains_key(stage) {
            self.order.push(stage.to_string());
        }
        self.data
            .entry(stage.to_string())
            .or_default()
            .entry(target.to_string())
            .or_default()
            .push(secs);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Serialize)]
pub(crate) struct Row {
    pub stage: String,
    /// Median seconds per target.
    pub median_s: BTreeMap<String, f64>,
    /// Every repetition's seconds per target.
    pub samples_s: BTreeMap<String, Vec<f64>>,
    pub fuse_over_ext4: f64,
    pub fuse_over_tmpfs: f64,
    /// `fuse+backup` over `fuse` (NaN without `--backup`).
    pub backup_over_fuse: f64,
}

pub(crate) fn rows(s: &Samples) -> Vec<Row> {
    s.order
        .iter()
        .map(|stage| {
            let per = &s.data[stage];
            let med: BTreeMap<String, f64> =
                per.iter().map(|(t, v)| (t.clone(), median(v))).collect();
            let m = |t: &str| med.get(t).copied().unwrap_or(f64::NAN);
            Row {
                stage: stage.clone(),
                fuse_over_ext4: m("fuse") / m("ext4"),
                fuse_over_tmpfs: m("fuse") / m("tmpfs"),
                backup_over_fuse: m(BACKUP_TARGET) / m("fuse"),
                median_s: med,
                samples_s: per.clone(),
            }
        })
        .collect()
}

fn ms(s: f64) -> String {
    if s < 0.1 {
        format!("{:.2}", s * 1e3)
    } else {
        format!("{:.0}", s * 1e3)
    }
}

pub(crate) fn markdown(rows: &[Row]) -> String {
    let backup = rows.iter().any(|r| r.median_s.contains_key(BACKUP_TARGET));
    let mut out = String::from("| stage | FUSE ms | tmpfs ms | ext4 ms | FUSE/ext4 | FUSE/tmpfs |");
    out += if backup {
        " FUSE+backup ms | FUSE+backup/FUSE |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    } else {
        "\n|---|---:|---:|---:|---:|---:|\n"
    };
    for r in rows {
        let m = |t: &str| r.median_s.get(t).copied().unwrap_or(f64::NAN);
        out += &format!(
            "| {} | {} | {} | {} | {:.2}x | {:.2}x |",
            r.stage,
            ms(m("fuse")),
            ms(m("tmpfs")),
            ms(m("ext4")),
            r.fuse_over_ext4,
            r.fuse_over_tmpfs
        );
        if backup {
            out += &format!(" {} | {:.2}x |", ms(m(BACKUP_TARGET)), r.backup_over_fuse);
        }
        out += "\n";
    }
    out
}
