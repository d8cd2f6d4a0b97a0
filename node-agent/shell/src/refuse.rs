//! Scripts the runtime refuses before running any of them.
//!
//! A few constructs are evaluated inside bashkit's interpreter, where no
//! registered command, hook or filesystem answer reaches, and bashkit gets
//! them wrong without saying so. A script using one of them would give a
//! silent wrong answer, so it is not run at all: the exec ends with
//! [`EXIT_REFUSED`](crate::EXIT_REFUSED) and a message naming the construct
//! and the runtime that runs it right (real bash in a container).
//!
//! The check walks the script's syntax tree (bashkit's own parser, the same
//! limits as the run): every command, function body, substitution and
//! here-document. A script that does not parse is left to the interpreter,
//! whose syntax report is bash's.
//!
//! One wrong answer is mended instead of refused, because refusing it would
//! refuse most scripts that test a directory: bashkit takes the empty
//! operand of `[[ -e ]]`, `-a`, `-d` and `-s` for the working directory.
//! An operand that is one parameter or an empty quoted string is rewritten
//! so that an empty value names no file ([`guard_empty_operands`]). The
//! walk also tells whether the script's top level is flat, which the
//! ordered stderr of the `stderr` module needs.

use bashkit::parser::{
    AssignmentValue, CaseItem, Command, CompoundCommand, Lexer, ParameterOp, Parser, Redirect,
    SpannedToken, Word, WordPart,
};

/// Why a script is not run: the construct as written and what goes wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The construct, e.g. `[[ -L ... ]]`.
    pub construct: String,
    /// What bashkit would do instead of bash's answer.
    pub reason: &'static str,
}

impl Refusal {
    /// The one-line message for the caller (also written to stderr).
    pub(crate) fn message(&self) -> String {
        format!(
            "shell: script not run: it uses {}, which the shell runtime cannot run as bash does ({}); \
             nothing was executed. `--runtime container` runs it in real bash.",
            self.construct, self.reason
        )
    }
}

/// `[[ ]]` unary operators bashkit does not evaluate: it takes each for
/// "the operator is a non-empty string", so `[[ -L nosuch ]]` is true.
const UNEVALUATED_UNARY: &[&str] = &[
    "-L", "-h", "-p", "-S", "-b", "-c", "-k", "-u", "-g", "-O", "-G", "-N", "-R", "-o",
];

/// `[[ ]]` unary operators bashkit answers with "the file exists" where
/// the runtime's answer is not that. (`-r` and `-w` are "exists" in the
/// runtime's own `test` too: permission bits are not enforced, the agent
/// can read and write every file of its computer.)
const EXISTS_ONLY_UNARY: &[&str] = &["-x"];

/// `[[ ]]` file tests that bashkit resolves the empty operand for as the
/// working directory (`[[ -e "" ]]` is true there, false in bash).
const EMPTY_IS_CWD_UNARY: &[&str] = &["-e", "-a", "-d", "-s"];

/// What to do with a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It parses and may run. `flat`: its top level is simple commands,
    /// pipelines of them and `;`/`&&`/`||` lists, calling no function of
    /// its own and no `eval`/`source`/`.` (see [`flat`]). `script`: the
    /// text to run instead, when operands had to be guarded (see
    /// [`guard_empty_operands`]). `filters`: the whole-input commands
    /// every use of which reads only stdin (see the `whole_input` module).
    Run {
        flat: bool,
        script: Option<String>,
        filters: Vec<&'static str>,
    },
    /// It does not parse: run it as written, so the interpreter's syntax
    /// report (and what bash runs before the error) stays bash's.
    Unparsed,
    /// It is not run at all.
    Refuse(Refusal),
}

/// Whether `script` may run, parsed with the run's parser limits.
pub(crate) fn check(script: &str, max_depth: usize, max_fuel: usize) -> Verdict {
    scan(script, max_depth, max_fuel, false).verdict
}

/// A simple command as the script writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Simple {
    /// The command name when it is a literal; `None` when it is computed
    /// (`$cmd`, `$(...)`) or absent (an assignment alone, [`Simple::bare`]).
    pub name: Option<String>,
    /// No name at all: `FOO=1` or a redirection alone.
    pub bare: bool,
    /// Each argument when it is a literal, else `None`.
    pub args: Vec<Option<String>>,
}

/// What one parse of a script tells: the [`Verdict`] and, when asked for,
/// every simple command (in function bodies, substitutions and
/// here-documents too, in the order of the walk) and the functions it
/// defines. The commands are complete only when the verdict is
/// [`Verdict::Run`]: the walk stops at the first refused construct.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    pub verdict: Verdict,
    pub commands: Vec<Simple>,
    pub functions: Vec<String>,
    /// A `$(...)` or backquote inside text the parser keeps unparsed (the
    /// operand of `${v:-...}`, `$((...))`, an array index): commands the
    /// walk cannot see. Set only when collecting.
    pub hidden: bool,
}

/// [`check`], also collecting the script's commands when `collect`.
pub(crate) fn scan(script: &str, max_depth: usize, max_fuel: usize, collect: bool) -> Scan {
    let done = |verdict| Scan {
        verdict,
        commands: Vec::new(),
        functions: Vec::new(),
        hidden: false,
    };
    let bash_command = crate::bash_command::references(script) > 0;
    let Ok(ast) = Parser::with_limits(script, max_depth, max_fuel).parse() else {
        if bash_command {
            // The partial run before the syntax error would read it empty.
            return done(Verdict::Refuse(bash_command_refusal(
                "bashkit leaves it empty, in DEBUG traps too, and the script does not parse",
            )));
        }
        return done(Verdict::Unparsed);
    };
    let mut walk = Walk {
        collect,
        ..Walk::default()
    };
    walk.commands(&ast.commands);
    if walk.nested_pattern
        && !bash_command
        && let Some(debraced) = debrace(script)
    {
        // `${x//${y}/-}` written `${x//$y/-}`, which bashkit reads right
        // and bash reads the same; the rest checked as any script.
        let mut again = scan(&debraced, max_depth, max_fuel, collect);
        if let Verdict::Run { script: run, .. } = &mut again.verdict {
            run.get_or_insert(debraced);
            return again;
        }
    }
    let commands = std::mem::take(&mut walk.simple);
    let functions = walk.functions.clone();
    let hidden = walk.hidden;
    let mut verdict = verdict(script, walk, &ast.commands, max_depth, max_fuel);
    if bash_command && let Verdict::Run { script: run, .. } = &mut verdict {
        // `$BASH_COMMAND` from the runtime's own table (the
        // `bash_command` module), or not run at all.
        match crate::bash_command::plan(script, max_depth, max_fuel) {
            Ok(crate::bash_command::Plan {
                script: Some(_), ..
            }) if run.is_some() => {
                verdict = Verdict::Refuse(bash_command_refusal(
                    "bashkit leaves it empty; the runtime gives bash's value in a DEBUG trap only \
                     where the line names the command, and here a line holds several commands \
                     and a [[ ]] operand had to be guarded too",
                ))
            }
            Ok(plan) => {
                let text = plan.script.as_deref().or(run.as_deref()).unwrap_or(script);
                *run = Some(format!("{}{text}", plan.prefix));
            }
            Err(reason) => verdict = Verdict::Refuse(bash_command_refusal(reason)),
        }
    }
    Scan {
        verdict,
        commands,
        functions,
        hidden,
    }
}

/// The verdict of a walked script.
fn verdict(
    script: &str,
    walk: Walk,
    ast_commands: &[Command],
    max_depth: usize,
    max_fuel: usize,
) -> Verdict {
    if let Some(refusal) = walk.found {
        return Verdict::Refuse(refusal);
    }
    let flat = flat(ast_commands, &walk.functions);
    let filters = walk
        .filters
        .iter()
        .filter(|(_, all)| *all)
        .map(|(name, _)| *name)
        .collect();
    if walk.guards == 0 {
        return Verdict::Run {
            flat,
            script: None,
            filters,
        };
    }
    match guard_empty_operands(script, walk.guards, max_depth, max_fuel) {
        Some(guarded) => Verdict::Run {
            flat,
            script: Some(guarded),
            filters,
        },
        None => Verdict::Refuse(Refusal {
            construct: "`[[ -e $var ]]` (also `-a`, `-d`, `-s`) with an operand that may be empty"
                .into(),
            reason: "bashkit's [[ ]] takes an empty operand for the working directory, so \
                     `[[ -e \"\" ]]` is true; `[ ... ]` (test) answers it right",
        }),
    }
}

/// Where a guarded operand points when it is empty: below a file, so no
/// file test is true for it, as none is for the empty name in bash.
const EMPTY_OPERAND: &str = "/dev/null/.empty-operand";

/// `script` with every `[[ -e NAME ]]`-style operand that is one parameter
/// (`$v`, `${v}`, `"$v"`, `"${v}"`, `$1`) written as `"${v:-EMPTY}"`, so
/// an empty value names no file, and an empty `''` or `""` as `'EMPTY'`;
/// `None` when that cannot be done exactly: the lexer did not find the
/// `expected` operands the syntax tree has (one inside `$(...)` or a
/// here-document), the script uses `set -u` (an unset name would no longer
/// fail), or the result does not check clean.
fn guard_empty_operands(
    script: &str,
    expected: usize,
    max_depth: usize,
    max_fuel: usize,
) -> Option<String> {
    if script.contains("nounset") || set_u(script) {
        return None;
    }
    let mut lexer = Lexer::new(script);
    let mut tokens = Vec::new();
    while let Some(token) = lexer.next_spanned_token() {
        tokens.push(token);
    }
    let text = |t: &SpannedToken| script.get(t.span.start.offset..t.span.end.offset);
    // bashkit does not export its token type; its `Debug` names the kind.
    let kind = |t: &SpannedToken| {
        let debug = format!("{:?}", t.token);
        match debug.find('(') {
            Some(at) => debug[..at].to_string(),
            None => debug,
        }
    };
    let word = |t: &SpannedToken, want: &[&str]| {
        kind(t) == "Word" && text(t).is_some_and(|text| want.contains(&text))
    };
    let mut edits = Vec::new();
    let mut in_cond = false;
    for i in 0..tokens.len() {
        match kind(&tokens[i]).as_str() {
            "DoubleLeftBracket" => in_cond = true,
            "DoubleRightBracket" => in_cond = false,
            _ => {}
        }
        if !in_cond || i + 3 >= tokens.len() {
            continue;
        }
        let starts = matches!(
            kind(&tokens[i]).as_str(),
            "DoubleLeftBracket" | "And" | "Or" | "LeftParen"
        ) || word(&tokens[i], &["!"]);
        let (op, operand, after) = (&tokens[i + 1], &tokens[i + 2], &tokens[i + 3]);
        let ends = matches!(
            kind(after).as_str(),
            "DoubleRightBracket" | "And" | "Or" | "RightParen"
        );
        if !(starts && word(op, EMPTY_IS_CWD_UNARY) && ends) {
            continue;
        }
        let replacement = match text(operand) {
            Some("''" | "\"\"") => Some(format!("'{EMPTY_OPERAND}'")),
            Some(written) => {
                parameter_name(written).map(|name| format!("\"${{{name}:-{EMPTY_OPERAND}}}\""))
            }
            None => None,
        };
        if let Some(replacement) = replacement {
            edits.push((
                operand.span.start.offset,
                operand.span.end.offset,
                replacement,
            ));
        }
    }
    if edits.len() != expected {
        return None;
    }
    let mut guarded = String::with_capacity(script.len() + edits.len() * 40);
    let mut at = 0;
    for (start, end, replacement) in edits {
        guarded.push_str(&script[at..start]);
        guarded.push_str(&replacement);
        at = end;
    }
    guarded.push_str(&script[at..]);
    let ast = Parser::with_limits(&guarded, max_depth, max_fuel)
        .parse()
        .ok()?;
    let mut walk = Walk::default();
    walk.commands(&ast.commands);
    (walk.found.is_none() && walk.guards == 0).then_some(guarded)
}

/// Whether the script turns on `set -u` in a short option cluster.
fn set_u(script: &str) -> bool {
    script.match_indices("set ").any(|(at, _)| {
        script[at + 4..]
            .split_whitespace()
            .take_while(|w| w.starts_with('-') || w.starts_with('+'))
            .any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('u'))
    })
}

/// The parameter a `[[ ]]` operand written as one parameter names:
/// `$v`, `${v}`, `"$v"`, `"${v}"` or a positional `$1`.
fn parameter_name(text: &str) -> Option<&str> {
    let inner = match text.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"')?,
        None => text,
    };
    let inner = inner.strip_prefix('$')?;
    let name = match inner.strip_prefix('{') {
        Some(rest) => rest.strip_suffix('}')?,
        None => inner,
    };
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let positional = name.len() == 1 && name.as_bytes()[0].is_ascii_digit() && name != "0";
    (identifier || positional).then_some(name)
}

/// Whether every top-level command is a simple command (not one of the
/// script's functions, `eval`, `source` or `.`), a pipeline of them or a
/// list of those: bashkit routes an `exec 2>` target once per top-level
/// command, so inside a compound command stderr would wait for its end.
fn flat(commands: &[Command], functions: &[String]) -> bool {
    commands.iter().all(|command| match command {
        Command::Simple(simple) => match simple.name.parts.as_slice() {
            [] => true,
            [WordPart::Literal(name)] => {
                !matches!(name.as_str(), "eval" | "source" | ".")
                    && !functions.iter().any(|f| f == name)
            }
            // A name that is expanded could be anything.
            _ => false,
        },
        Command::Pipeline(pipeline) => flat(&pipeline.commands, functions),
        Command::List(list) => {
            flat(std::slice::from_ref(&list.first), functions)
                && list
                    .rest
                    .iter()
                    .all(|(_, c)| flat(std::slice::from_ref(c), functions))
        }
        Command::Function(_) => true,
        Command::Compound(..) => false,
    })
}

/// The refusal of a script reading `$BASH_COMMAND` where the runtime
/// cannot give bash's value.
fn bash_command_refusal(reason: &'static str) -> Refusal {
    Refusal {
        construct: "`$BASH_COMMAND`".into(),
        reason,
    }
}

/// `script` with each `${name}` inside the pattern or replacement of a
/// `${var/pattern/string}` written `$name` (a name not followed by a
/// character that would continue it), which bash expands the same and
/// bashkit's parser does not take for the end of the pattern; `None` when
/// that does not remove every nested expansion there (`${y:-a}`, `$(...)`,
/// a multi-digit positional) or the script has a quoted here-document,
/// whose body is literal text this scan does not tell apart.
fn debrace(script: &str) -> Option<String> {
    if script.contains("<<'")
        || script.contains("<<\"")
        || script.contains("<<\\")
        || script.contains("<<-'")
        || script.contains("<<-\"")
        || script.contains("<<-\\")
    {
        return None;
    }
    let b = script.as_bytes();
    let name_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = String::with_capacity(script.len());
    let mut i = 0;
    let mut in_dq = false;
    let mut changed = false;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let end = (i + 2).min(b.len());
                out.push_str(&script[i..end]);
                i = end;
            }
            b'\'' if !in_dq => {
                let end = script[i + 1..].find('\'').map_or(b.len(), |at| i + 2 + at);
                out.push_str(&script[i..end]);
                i = end;
            }
            b'"' => {
                in_dq = !in_dq;
                out.push('"');
                i += 1;
            }
            b'$' if b.get(i + 1) == Some(&b'{') => {
                // `${name/` or `${name//`: a replacement expansion.
                let mut j = i + 2;
                while j < b.len() && name_char(b[j]) {
                    j += 1;
                }
                if j == i + 2 || b.get(j) != Some(&b'/') {
                    out.push_str("${");
                    i += 2;
                    continue;
                }
                // Its end: the `}` closing it, nested `${...}` counted.
                let mut depth = 1;
                let mut k = j;
                while k < b.len() && depth > 0 {
                    match b[k] {
                        b'\\' => k += 1,
                        b'{' if k > 0 && b[k - 1] == b'$' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    k += 1;
                }
                if depth != 0 {
                    return None;
                }
                let inner = &script[j..k - 1];
                let mut rewritten = String::with_capacity(inner.len());
                let ib = inner.as_bytes();
                let mut m = 0;
                while m < ib.len() {
                    if ib[m] == b'$' && ib.get(m + 1) == Some(&b'{') {
                        let mut e = m + 2;
                        while e < ib.len() && name_char(ib[e]) {
                            e += 1;
                        }
                        let name = &inner[m + 2..e];
                        let simple = ib.get(e) == Some(&b'}')
                            && !name.is_empty()
                            && (name.as_bytes()[0].is_ascii_alphabetic()
                                || name.as_bytes()[0] == b'_'
                                || name.len() == 1)
                            && !ib.get(e + 1).is_some_and(|c| name_char(*c));
                        if !simple {
                            return None;
                        }
                        rewritten.push('$');
                        rewritten.push_str(name);
                        m = e + 1;
                        changed = true;
                        continue;
                    }
                    if ib[m] == b'`' || (ib[m] == b'$' && ib.get(m + 1) == Some(&b'(')) {
                        return None;
                    }
                    rewritten.push(ib[m] as char);
                    m += 1;
                }
                out.push_str(&script[i..j]);
                out.push_str(&rewritten);
                out.push('}');
                i = k;
            }
            _ => {
                let ch = script[i..].chars().next()?;
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    changed.then_some(out)
}

#[derive(Default)]
struct Walk {
    /// Whether to record every simple command in `simple`.
    collect: bool,
    simple: Vec<Simple>,
    /// See [`Scan::hidden`].
    hidden: bool,
    found: Option<Refusal>,
    /// The refusal found is a nested expansion in a replacement pattern
    /// (see [`debrace`]).
    nested_pattern: bool,
    /// Names of the functions the script defines.
    functions: Vec<String>,
    /// `[[ -e $v ]]`-style operands that may be empty and are one
    /// parameter, to be guarded (see [`guard_empty_operands`]).
    guards: usize,
    /// Whole-input commands the script runs, each with whether every use
    /// reads only stdin (see the `whole_input` module).
    filters: Vec<(&'static str, bool)>,
}

impl Walk {
    fn refuse(&mut self, construct: String, reason: &'static str) {
        if self.found.is_none() {
            self.found = Some(Refusal { construct, reason });
        }
    }

    fn commands(&mut self, commands: &[Command]) {
        for command in commands {
            if self.found.is_some() {
                return;
            }
            self.command(command);
        }
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => {
                if let [WordPart::Literal(name)] = simple.name.parts.as_slice()
                    && let Some(known) = crate::whole_input::COMMANDS.iter().find(|c| *c == name)
                {
                    let args: Vec<Option<&str>> = simple.args.iter().map(plain_text).collect();
                    let filter = crate::whole_input::reads_only_stdin(known, &args);
                    match self.filters.iter_mut().find(|(n, _)| n == known) {
                        Some((_, all)) => *all &= filter,
                        None => self.filters.push((known, filter)),
                    }
                }
                if self.collect {
                    self.simple.push(Simple {
                        name: literal_text(&simple.name).filter(|n| !n.is_empty()),
                        bare: simple.name.parts.is_empty()
                            || literal_text(&simple.name).is_some_and(|n| n.is_empty()),
                        args: simple.args.iter().map(literal_text).collect(),
                    });
                }
                self.word(&simple.name);
                self.words(&simple.args);
                self.redirects(&simple.redirects);
                for assignment in &simple.assignments {
                    match &assignment.value {
                        AssignmentValue::Scalar(word) => self.word(word),
                        AssignmentValue::Array(words) => self.words(words),
                    }
                }
            }
            Command::Pipeline(pipeline) => self.commands(&pipeline.commands),
            Command::List(list) => {
                self.command(&list.first);
                for (_, next) in &list.rest {
                    self.command(next);
                }
            }
            Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirects(redirects);
            }
            Command::Function(function) => {
                self.functions.push(function.name.clone());
                self.command(&function.body);
            }
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::If(c) => {
                self.commands(&c.condition);
                self.commands(&c.then_branch);
                for (condition, branch) in &c.elif_branches {
                    self.commands(condition);
                    self.commands(branch);
                }
                if let Some(branch) = &c.else_branch {
                    self.commands(branch);
                }
            }
            CompoundCommand::For(c) => {
                if let Some(words) = &c.words {
                    self.words(words);
                }
                self.commands(&c.body);
            }
            CompoundCommand::ArithmeticFor(c) => {
                // The clauses are kept as text: a command in them is hidden.
                self.hidden |= [&c.init, &c.condition, &c.step]
                    .iter()
                    .any(|text| substitutes(text));
                self.commands(&c.body)
            }
            CompoundCommand::While(c) => {
                self.commands(&c.condition);
                self.commands(&c.body);
            }
            CompoundCommand::Until(c) => {
                self.commands(&c.condition);
                self.commands(&c.body);
            }
            CompoundCommand::Case(c) => {
                self.word(&c.word);
                for CaseItem {
                    patterns, commands, ..
                } in &c.cases
                {
                    self.words(patterns);
                    self.commands(commands);
                }
            }
            CompoundCommand::Select(c) => {
                self.words(&c.words);
                self.commands(&c.body);
            }
            CompoundCommand::Subshell(commands) | CompoundCommand::BraceGroup(commands) => {
                self.commands(commands)
            }
            CompoundCommand::Arithmetic(text) => self.hidden |= substitutes(text),
            CompoundCommand::Time(t) => {
                if let Some(command) = &t.command {
                    self.command(command);
                }
            }
            CompoundCommand::Conditional(words) => {
                self.words(words);
                self.conditional(words);
            }
            CompoundCommand::Coproc(c) => self.command(&c.body),
        }
    }

    fn redirects(&mut self, redirects: &[Redirect]) {
        for redirect in redirects {
            self.word(&redirect.target);
        }
    }

    fn words(&mut self, words: &[Word]) {
        for word in words {
            self.word(word);
        }
    }

    fn word(&mut self, word: &Word) {
        if self.collect {
            self.hidden |= word.parts.iter().any(hides_commands);
        }
        for part in &word.parts {
            match part {
                WordPart::CommandSubstitution(commands)
                | WordPart::ProcessSubstitution { commands, .. } => self.commands(commands),
                WordPart::CompoundAssignment { elements, .. } => self.words(elements),
                WordPart::ParameterExpansion { name, operator, .. } => {
                    if let ParameterOp::ReplaceFirst {
                        pattern,
                        replacement,
                    }
                    | ParameterOp::ReplaceAll {
                        pattern,
                        replacement,
                    } = operator
                        && (nested_expansion(pattern) || nested_expansion(replacement))
                    {
                        self.nested_pattern |= self.found.is_none();
                        self.refuse(
                            format!("`${{{name}/...${{...}}...}}`"),
                            "a `${...}` or `$(...)` inside the pattern or replacement of \
                             `${var/pattern/string}` ends the pattern at its inner `}` or `/`",
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The `[[ ]]` primaries bashkit evaluates wrongly, found the way bashkit
    /// splits the expression: `||`, then `&&`, then `!`, then wrapping
    /// parentheses, down to leaves of expanded words.
    fn conditional(&mut self, words: &[Word]) {
        if words.is_empty() || self.found.is_some() {
            return;
        }
        if wrapped(words) {
            return self.conditional(&words[1..words.len() - 1]);
        }
        for op in ["||", "&&"] {
            if let Some(i) = top_level(words, op) {
                self.conditional(&words[..i]);
                self.conditional(&words[i + 1..]);
                return;
            }
        }
        if literal(&words[0]) == Some("!") {
            return self.conditional(&words[1..]);
        }
        if let [left, op, right] = words
            && let Some(op @ ("-nt" | "-ot" | "-ef")) = literal(op)
        {
            if op == "-ef" {
                self.refuse(
                    "`[[ ... -ef ... ]]`".into(),
                    "bashkit's [[ ]] compares the two names as paths from `/`, not the files \
                     they name (hard links, links, relative names); `[ ... -ef ... ]` (test) \
                     answers it right",
                );
            } else if !absolute(left) || !absolute(right) {
                self.refuse(
                    format!("`[[ ... {op} ... ]]` with a relative name"),
                    "bashkit's [[ ]] looks relative names up from `/`, not the working \
                     directory; `[ ... ]` (test) answers it right",
                );
            }
            return;
        }
        let [op, operand] = words else {
            return;
        };
        let Some(op) = literal(op) else {
            return;
        };
        if UNEVALUATED_UNARY.contains(&op) {
            self.refuse(
                format!("`[[ {op} ... ]]`"),
                "bashkit's [[ ]] does not evaluate this operator and answers true; \
                 `[ ... ]` (test) answers it right",
            );
        } else if EXISTS_ONLY_UNARY.contains(&op) {
            self.refuse(
                format!("`[[ {op} ... ]]`"),
                "bashkit's [[ ]] answers it with \"the file exists\", whatever its mode; \
                 `[ ... ]` (test) answers it right",
            );
        } else if EMPTY_IS_CWD_UNARY.contains(&op) && may_be_empty(operand) {
            if one_parameter(operand) || empty_literal(operand) {
                self.guards += 1;
            } else {
                self.refuse(
                    format!("`[[ {op} ... ]]` with an operand that may be empty"),
                    "bashkit's [[ ]] takes an empty operand for the working directory, so \
                     `[[ -e \"\" ]]` is true; `[ ... ]` (test) answers it right",
                );
            }
        }
    }
}

/// The word as its one unquoted literal part (an operator of `[[ ]]`).
fn literal(word: &Word) -> Option<&str> {
    match word.parts.as_slice() {
        [WordPart::Literal(text)] if !word.quoted => Some(text),
        _ => None,
    }
}

/// Whether `words` is `( ... )` with the parentheses matching each other.
fn wrapped(words: &[Word]) -> bool {
    if words.len() < 2
        || literal(&words[0]) != Some("(")
        || literal(&words[words.len() - 1]) != Some(")")
    {
        return false;
    }
    let mut depth = 0usize;
    for (i, word) in words.iter().enumerate() {
        match literal(word) {
            Some("(") => depth += 1,
            Some(")") => {
                depth = depth.saturating_sub(1);
                if depth == 0 && i + 1 < words.len() {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0
}

/// The last `op` outside parentheses (not the first word), as bashkit
/// splits.
fn top_level(words: &[Word], op: &str) -> Option<usize> {
    let mut depth = 0usize;
    for i in (0..words.len()).rev() {
        match literal(&words[i]) {
            Some(")") => depth += 1,
            Some("(") => depth = depth.saturating_sub(1),
            Some(found) if found == op && depth == 0 && i > 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// The text of a word with no expansion in it, as the command sees it.
/// The text of a word made of literal parts only (quotes removed), as the
/// command sees it; `None` when any part is expanded, or when quoted and
/// unquoted parts mix with glob characters (the lexer escapes those).
fn literal_text(word: &Word) -> Option<String> {
    if word.quoted && word.has_unquoted_glob {
        return None;
    }
    let mut text = String::new();
    for part in &word.parts {
        match part {
            WordPart::Literal(piece) => text.push_str(piece),
            _ => return None,
        }
    }
    Some(text)
}

/// Whether unparsed `text` holds a command substitution.
fn substitutes(text: &str) -> bool {
    text.contains("$(") || text.contains('`')
}

/// Whether `part` keeps text unparsed that holds a command substitution.
fn hides_commands(part: &WordPart) -> bool {
    match part {
        WordPart::ParameterExpansion { operand, .. }
        | WordPart::IndirectExpansion { operand, .. } => substitutes(operand),
        WordPart::ArithmeticExpansion(text) | WordPart::ArrayAccess { index: text, .. } => {
            substitutes(text)
        }
        WordPart::Substring { offset, length, .. } => {
            substitutes(offset) || length.as_deref().is_some_and(substitutes)
        }
        _ => false,
    }
}

fn plain_text(word: &Word) -> Option<&str> {
    match word.parts.as_slice() {
        [WordPart::Literal(text)] => Some(text),
        _ => None,
    }
}

/// Whether `word` is a quoted empty string (`''`, `""`).
fn empty_literal(word: &Word) -> bool {
    word.quoted && matches!(word.parts.as_slice(), [WordPart::Literal(text)] if text.is_empty())
}

/// Whether `word` starts with a literal `/`.
fn absolute(word: &Word) -> bool {
    matches!(word.parts.first(), Some(WordPart::Literal(text)) if text.starts_with('/'))
}

/// Whether `word` is one parameter expansion and nothing else (`$v`,
/// `"${v}"`), the operands [`guard_empty_operands`] can guard.
fn one_parameter(word: &Word) -> bool {
    matches!(word.parts.as_slice(), [WordPart::Variable(name)] if parameter_name(&format!("${name}")).is_some())
}

/// Whether `word` can expand to the empty string: it has no literal text
/// and no `${v:-text}` with literal text.
fn may_be_empty(word: &Word) -> bool {
    !word.parts.iter().any(|part| match part {
        WordPart::Literal(text) => !text.is_empty(),
        WordPart::ParameterExpansion {
            operator: ParameterOp::UseDefault,
            operand,
            colon_variant: true,
            ..
        } => !operand.is_empty() && !operand.contains(['$', '`', '\'', '"', '\\']),
        _ => false,
    })
}

/// Whether a `${var/pattern/string}` piece holds `${` or `$(` outside
/// double quotes: bashkit's parser stops the piece at the inner `}` or `/`.
fn nested_expansion(text: &str) -> bool {
    let mut in_dq = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => {
                chars.next();
            }
            '"' => in_dq = !in_dq,
            '$' if !in_dq && matches!(chars.peek(), Some('{') | Some('(')) => return true,
            '`' if !in_dq => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(script: &str) -> Option<String> {
        match check(script, 100, 1_000_000) {
            Verdict::Refuse(r) => Some(r.construct),
            Verdict::Run { .. } | Verdict::Unparsed => None,
        }
    }

    #[test]
    fn file_tests_bashkit_does_not_evaluate_are_refused() {
        for op in [
            "-L", "-h", "-p", "-S", "-b", "-c", "-k", "-u", "-g", "-O", "-G", "-N",
        ] {
            let script = format!("touch r; [[ {op} r ]] && echo y");
            assert_eq!(
                refused(&script),
                Some(format!("`[[ {op} ... ]]`")),
                "{script}"
            );
        }
        assert!(refused("[[ -x r ]]").is_some());
        // Permission bits are not enforced: -r and -w are "exists", as in
        // the runtime's `test`.
        assert_eq!(refused("[[ -r r && -w r ]]"), None);
        assert!(refused("if [[ ! -x $f && -n $g ]]; then :; fi").is_some());
        assert!(refused("f() { [[ ( -x x ) ]]; }").is_some());
        assert!(refused("echo $( [[ -L x ]] )").is_some());
        assert!(refused("[[ b -nt a ]]").is_some());
        assert!(refused("[[ $f -ot /etc/passwd ]]").is_some());
        assert!(refused("[[ /a -ef /b ]]").is_some());
        assert_eq!(refused("[[ /w/b -nt /w/a ]]"), None);
    }

    #[test]
    fn file_tests_bashkit_gets_right_run() {
        assert_eq!(refused("[[ -f $f ]] && echo y"), None);
        assert_eq!(refused("[[ -e x && -d \"$d/sub\" ]]"), None);
        assert_eq!(refused("[[ -n $x || -z $y ]]"), None);
        // A binary test whose left side reads like an operator.
        assert_eq!(refused("[[ -L == -L ]]"), None);
        assert_eq!(refused("[ -L x ] && test -x y"), None);
        // Not a conditional at all.
        assert_eq!(refused("echo '[[ -L x ]]'"), None);
    }

    fn guarded(script: &str) -> Option<String> {
        match check(script, 100, 1_000_000) {
            Verdict::Run { script, .. } => script,
            _ => None,
        }
    }

    #[test]
    fn an_operand_that_is_one_parameter_is_guarded_against_the_empty_value() {
        assert_eq!(
            guarded("f=\"\"; [[ -e $f ]] && echo exists").as_deref(),
            Some("f=\"\"; [[ -e \"${f:-/dev/null/.empty-operand}\" ]] && echo exists")
        );
        assert_eq!(
            guarded("if [[ ! -d \"${dir}\" || -s \"$1\" ]]; then :; fi").as_deref(),
            Some(
                "if [[ ! -d \"${dir:-/dev/null/.empty-operand}\" || \
                 -s \"${1:-/dev/null/.empty-operand}\" ]]; then :; fi"
            )
        );
        // The text `[[ -e $f ]]` outside a conditional is left alone.
        assert_eq!(
            guarded("echo '[[ -e $f ]]'; [[ -e $f ]]").as_deref(),
            Some("echo '[[ -e $f ]]'; [[ -e \"${f:-/dev/null/.empty-operand}\" ]]")
        );
        assert_eq!(guarded("[[ -d \"$dir/\" ]]"), None);
        assert_eq!(
            guarded("[[ -e '' ]] || echo no; [[ -d \"\" ]]").as_deref(),
            Some(
                "[[ -e '/dev/null/.empty-operand' ]] || echo no; \
                 [[ -d '/dev/null/.empty-operand' ]]"
            )
        );
    }

    #[test]
    fn an_operand_that_may_be_empty_and_cannot_be_guarded_is_refused() {
        assert!(refused("[[ -e $a$b ]]").is_some());
        assert!(refused("x=$( [[ -e $f ]] && echo y )").is_some());
        assert!(refused("set -eu; [[ -e $f ]]").is_some());
        assert!(refused("cat <<EOF\n[[ -e $f ]]\nEOF\n[[ -e $f ]]").is_some());
    }

    #[test]
    fn nested_expansions_in_a_replacement_pattern_are_refused() {
        assert!(refused("x=a/b/c; y=/; echo ${x//${y:-/}/-}").is_some());
        assert!(refused("echo \"${x/$(echo a)/b}\"").is_some());
        assert!(refused("echo ${x/a/${y}z}").is_some());
        assert!(refused("cat <<'EOF'\n${x//${y}/-}\nEOF\necho ${x//${y}/-}").is_some());
        assert_eq!(refused("echo ${x//$y/-} ${x//\"${y}\"/-} ${x#${y}}"), None);
    }

    #[test]
    fn nested_names_in_a_replacement_pattern_are_written_without_braces() {
        let run = |script: &str| match check(script, 100, 1_000_000) {
            Verdict::Run { script, .. } => script,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            run("x=a/b/c; y=/; echo ${x//${y}/-} '${x//${y}/-}' \"${x/${y}/${1}}\""),
            Some("x=a/b/c; y=/; echo ${x//$y/-} '${x//${y}/-}' \"${x/$y/$1}\"".into())
        );
    }

    #[test]
    fn bash_command_is_refused_where_the_line_does_not_name_the_command() {
        assert_eq!(
            refused("trap 'echo \"DBG $BASH_COMMAND\"' DEBUG; echo a"),
            None
        );
        assert!(refused("trap 'echo \"DBG $BASH_COMMAND\"' DEBUG; true && echo b").is_some());
        assert!(refused("echo $BASH_COMMAND").is_some());
        assert!(refused("echo ${#BASH_COMMAND}").is_some());
        assert_eq!(refused("echo BASH_COMMAND $BASH_COMMANDS"), None);
    }

    #[test]
    fn flat_scripts_are_told_apart() {
        let flat = |script: &str| {
            matches!(
                check(script, 100, 1_000_000),
                Verdict::Run { flat: true, .. }
            )
        };
        assert!(flat("echo out1; echo err1 >&2; echo out2"));
        assert!(flat(
            "cd x && make | tee log || echo failed >&2; f() { :; }"
        ));
        assert!(!flat("for i in 1; do echo $i; done"));
        assert!(!flat("f() { echo a; }; f"));
        assert!(!flat("eval 'echo a'"));
        assert!(!flat("echo a | while read l; do :; done"));
        assert!(!flat("$cmd x"));
    }

    #[test]
    fn scripts_that_do_not_parse_are_left_to_the_interpreter() {
        assert_eq!(
            check("if [[ -L x ]]; then", 100, 1_000_000),
            Verdict::Unparsed
        );
    }
}
