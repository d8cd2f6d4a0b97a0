//! Medians, output comparison, the printed table and the JSON report.

use serde::Serialize;
use std::time::Duration;

/// How a target's output compares with GNU bash's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Agreement {
    /// Byte for byte, status included.
    Same,
    /// Same once runs of blanks are collapsed and lines trimmed (column
    /// padding such as `uniq -c`'s count width).
    SameIgnoringBlanks,
    Differs,
}

impl Agreement {
    pub(crate) fn compare(ours: &[u8], reference: &[u8]) -> Agreement {
        if ours == reference {
            Agreement::Same
        } else if squeeze(ours) == squeeze(reference) {
            Agreement::SameIgnoringBlanks
        } else {
            Agreement::Differs
        }
    }

    fn short(self) -> &'static str {
        match self {
            Agreement::Same => "=",
            Agreement::SameIgnoringBlanks => "~",
            Agreement::Differs => "DIFF",
        }
    }
}

fn squeeze(text: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// One target's numbers for one scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TargetResult {
    pub target: String,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub samples_ms: Vec<f64>,
    pub status: i32,
    /// Output (stdout, status, and the check script's stdout) against bash.
    pub agreement: Agreement,
    /// The first run's stdout, cut to 2,000 bytes.
    pub stdout_head: String,
    /// The first run's stderr, cut to 2,000 bytes.
    pub stderr_head: String,
}

/// One scenario: its script and every target's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScenarioResult {
    pub key: String,
    pub script: String,
    pub input_files: usize,
    pub input_bytes: usize,
    pub targets: Vec<TargetResult>,
    /// ours / just-bash and ours / bash, medians (below 1: ours is faster).
    pub ours_over_just_bash: Option<f64>,
    pub ours_over_bash: Option<f64>,
    pub grpc_over_just_bash: Option<f64>,
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median of `samples` (mean of the middle two for an even count).
pub(crate) fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(crate) fn head(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(2000)];
    String::from_utf8_lossy(cut).into_owned()
}

impl ScenarioResult {
    pub(crate) fn get(&self, target: &str) -> Option<&TargetResult> {
        self.targets.iter().find(|t| t.target == target)
    }

    /// Fills the ratio fields from the medians.
    pub(crate) fn with_ratios(mut self) -> Self {
        let m = |t: &str| self.get(t).map(|r| r.median_ms);
        let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
        let (jb, bash) = (m("just-bash"), m("bash"));
        let (ours, grpc) = (m("ours"), m("ours-grpc"));
        self.ours_over_just_bash = ratio(ours, jb);
        self.ours_over_bash = ratio(ours, bash);
        self.grpc_over_just_bash = ratio(grpc, jb);
        self
    }
}

/// The printed table: medians in ms, ratios, and the output agreement of
/// each target with bash (`=` same, `~` same but for blank padding).
pub(crate) fn table(results: &[ScenarioResult], targets: &[&str]) -> String {
    let mut out = format!("{:<6}", "script");
    for t in targets {
        out.push_str(&format!(" {t:>11}"));
    }
    out.push_str(&format!(
        " {:>10} {:>10} {:>10}  outputs vs bash\n",
        "ours/jb", "ours/bash", "grpc/jb"
    ));
    let fmt_ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}"));
    for r in results {
        out.push_str(&format!("{:<6}", r.key));
        for t in targets {
            let cell = r
                .get(t)
                .map_or("-".into(), |x| format!("{:.1}", x.median_ms));
            out.push_str(&format!(" {cell:>11}"));
        }
        out.push_str(&format!(
            " {:>10} {:>10} {:>10}  ",
            fmt_ratio(r.ours_over_just_bash),
            fmt_ratio(r.ours_over_bash),
            fmt_ratio(r.grpc_over_just_bash)
        ));
        let agreements: Vec<String> = r
            .targets
            .iter()
            .filter(|t| t.target != "bash")
            .map(|t| format!("{} {}", t.target, t.agreement.short()))
            .collect();
        out.push_str(&agreements.join(", "));
        out.push('\n');
    }
    out.push_str("(median wall-clock ms; ratios below 1: ours is faster; outputs: = same bytes, ~ same but for blank padding, DIFF differs)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn agreement_levels() {
        assert_eq!(Agreement::compare(b"1 a\n", b"1 a\n"), Agreement::Same);
        assert_eq!(
            Agreement::compare(b"   1 a\n", b"      1 a\n"),
            Agreement::SameIgnoringBlanks
        );
        assert_eq!(Agreement::compare(b"1 a\n", b"1 b\n"), Agreement::Differs);
    }
}
