//! The scripts timed by the benchmark: typical things an agent asks a shell
//! to do, each with its input files.

use crate::data::{self, File};

/// One benchmark script.
pub(crate) struct Scenario {
    /// Short key used on the command line and in the JSON report.
    pub key: &'static str,
    /// The script text, the same for every target.
    pub script: &'static str,
    /// Input files, paths relative to the working directory.
    pub files: Vec<File>,
    /// Whether the script changes its input files: they are then written
    /// again (untimed) before every run.
    pub mutates: bool,
    /// Script run once, untimed, after the first run to compare the state
    /// the script left (its own output says nothing about it).
    pub check: Option<&'static str>,
}

/// Every scenario, in report order.
pub(crate) fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            key: "tree",
            script: "find . -name '*.rs' | wc -l; grep -rn 'TODO' src | wc -l",
            files: data::source_tree(1000),
            mutates: false,
            check: None,
        },
        Scenario {
            key: "sed",
            script: "sed -i 's/foo/bar/g' *.txt",
            files: data::sed_files(100),
            mutates: true,
            check: Some("cat *.txt | md5sum; grep -c foo f000.txt; grep -c bar f099.txt"),
        },
        Scenario {
            key: "jq",
            script: "jq '[.items[] | select(.score > 50) | .name] | length' data.json",
            files: data::json_doc(5_000_000),
            mutates: false,
            check: None,
        },
        Scenario {
            key: "loop",
            script: "i=0; s=0; while [ $i -lt 10000 ]; do s=$((s+i)); i=$((i+1)); done; echo $s",
            files: Vec::new(),
            mutates: false,
            check: None,
        },
        Scenario {
            key: "sort",
            script: "sort words.txt | uniq -c | sort -n",
            files: data::word_lines(100_000),
            mutates: false,
            check: None,
        },
    ]
}
