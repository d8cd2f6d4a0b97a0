//! `$BASH_COMMAND` in `DEBUG` traps, from the runtime's own reading of the
//! script.
//!
//! bashkit never sets `$BASH_COMMAND`: a `DEBUG` trap reading it gets the
//! empty string. bashkit does run the trap before each simple command,
//! `[[ ]]`, `case` and `for` round, with `$LINENO` the line of the command
//! about to run, and it follows a nameref to an array element whose
//! subscript is an expression, evaluating the subscript at each use. So a
//! script whose commands can be told apart by their line gets bash's value
//! without touching the interpreter: the runtime parses the script, prints
//! each command the way bash prints it (bashkit's public
//! [`function_string`], a port of bash's command printer), and puts in
//! front of the script's first line
//!
//! ```text
//! declare -a __agentcomputer_bash_command=([3]='echo a' ...); declare -n BASH_COMMAND='__agentcomputer_bash_command[LINENO]'; : /bin/bash;
//! ```
//!
//! ([`prefix`]). Where the line does not name one command the script is
//! refused instead (see [`plan`]): a line holding two commands the trap
//! fires for (`a; b`, a pipeline, `a && b`), `$BASH_COMMAND` read anywhere
//! but in a `DEBUG` handler given as one literal word, `eval`, `source`, or
//! a construct whose line the syntax tree does not carry (`(( ))`, `for ((
//! ))`, `select`, `coproc`, `time`).

use bashkit::parser::{
    AssignmentValue, Command, CompoundCommand, FunctionDef, Lexer, ListOperator, Parser, Redirect,
    SimpleCommand, Word, WordPart, function_string,
};

/// A reason for refusing, as [`crate::refuse::Refusal::reason`] words it.
macro_rules! why {
    ($detail:literal) => {
        concat!(
            "bashkit leaves it empty; the runtime gives bash's value in a DEBUG trap \
             only where the line names the command, and here ",
            $detail
        )
    };
}

/// The array that holds each line's command text.
const TABLE: &str = "__agentcomputer_bash_command";

/// What to put in front of the script's first line, or why that cannot
/// give bash's value.
pub(crate) fn plan(script: &str, max_depth: usize, max_fuel: usize) -> Result<Plan, &'static str> {
    // Parsed as the body of a function whose opening is on the first line,
    // so every line keeps its number and every word keeps its text as
    // written (bashkit's parser records it inside function definitions,
    // for its printer).
    let opening = "__agentcomputer_f() { ";
    let wrapped = format!("{opening}{script}\n}}");
    let ast = Parser::with_limits(&wrapped, max_depth, max_fuel)
        .parse()
        .map_err(|_| why!("the script does not parse inside a function body"))?;
    let [Command::Function(FunctionDef { body, .. })] = ast.commands.as_slice() else {
        return Err(why!("the script does not parse inside a function body"));
    };
    let Command::Compound(CompoundCommand::BraceGroup(commands), _) = body.as_ref() else {
        return Err(why!("the script does not parse inside a function body"));
    };
    if script.contains("extdebug") {
        // bashkit does not skip the command when the trap returns non-zero.
        return Err(why!(
            "extdebug, whose DEBUG trap bashkit does not let skip a command"
        ));
    }
    let mut walk = Walk {
        traced: traced(script),
        ..Walk::default()
    };
    walk.commands(commands, 0);
    if let Some(reason) = walk.failed {
        return Err(reason);
    }
    // Each `[[` of the walk, in source order, is the next `[[` token.
    let brackets = bracket_lines(&wrapped);
    if brackets.len() != walk.brackets.len() {
        return Err(why!("a [[ ]] whose line the runtime cannot place"));
    }
    for (unit, (line, offset)) in walk.brackets.iter().zip(brackets) {
        if let Some(unit) = unit {
            walk.units[*unit].line = line;
            walk.units[*unit].order = offset;
        }
    }
    // A traced function's body starts with a fire at the definition's
    // line, whose value is the call: known when every call reads the same.
    // Nothing else may share that line but the body's own commands, which
    // fire after it.
    for (name, line, start, end) in std::mem::take(&mut walk.functions) {
        let calls: Vec<&str> = walk
            .units
            .iter()
            .filter(|u| u.name.as_deref() == Some(name.as_str()))
            .map(|u| u.text.as_str())
            .collect();
        let Some(call) = calls.first().map(|c| c.to_string()) else {
            continue;
        };
        let outside = walk
            .units
            .iter()
            .any(|u| u.line == line && !(start < u.order && u.order < end));
        if outside || calls.iter().any(|c| *c != call) {
            return Err(why!(
                "a function the DEBUG trap runs in, whose calls the runtime cannot place"
            ));
        }
        walk.name = None;
        walk.unit(line, start, call, false);
    }
    // Everything read as `$BASH_COMMAND` is inside a DEBUG handler.
    let in_handlers: usize = walk.handlers.iter().map(|h| references(h)).sum();
    if in_handlers != references(script) {
        return Err(why!(
            "it is read outside a DEBUG trap given as one literal word"
        ));
    }
    // Before a top-level `trap ... DEBUG` the trap is not set yet: the
    // commands on its line up to it do not fire it.
    let mut units = walk.units;
    units.sort_by_key(|u| (u.line, u.order));
    let mut kept: Vec<&Unit> = Vec::new();
    for unit in &units {
        if unit.top_debug_trap {
            kept.retain(|k| k.line != unit.line);
            continue;
        }
        kept.push(unit);
    }
    let mut lines: Vec<Vec<&Unit>> = Vec::new();
    for unit in kept {
        match lines.last_mut() {
            Some(line) if line[0].line == unit.line => line.push(unit),
            _ => lines.push(vec![unit]),
        }
    }
    let underscore = crate::stderr::START_UNDERSCORE;
    if lines.iter().all(|line| line.len() == 1) {
        let table: String = lines
            .iter()
            .map(|line| format!("[{}]={} ", line[0].line, quote(&line[0].text)))
            .collect();
        return Ok(Plan {
            prefix: format!(
                "declare -a {TABLE}=({table}); declare -n BASH_COMMAND='{TABLE}[LINENO]'; : {underscore}; "
            ),
            script: None,
        });
    }
    // A line with several commands (`a | b`, `a; b`, a loop on one line):
    // the trap fires for them in order, each time all of them, so the n-th
    // read on a line is its n-th command (modulo their count, for a loop
    // on one line), when every fire reads the value once.
    if lines
        .iter()
        .any(|line| line.len() > 1 && line.iter().any(|u| u.skippable))
    {
        return Err(why!(
            "a line holds commands the DEBUG trap runs before, some of which may be skipped"
        ));
    }
    if lines.iter().any(|line| line.len() >= PER_LINE) {
        return Err(why!(
            "a line holds more than one command the DEBUG trap runs before"
        ));
    }
    if !walk
        .handlers
        .iter()
        .all(|h| reads_once(h, max_depth, max_fuel))
        || lists_traps(script)
    {
        return Err(why!(
            "a line holds more than one command the DEBUG trap runs before, and the trap \
             does not read it exactly once (or the script lists its traps)"
        ));
    }
    let mut table = String::new();
    let mut counts = String::new();
    for line in &lines {
        for (k, unit) in line.iter().enumerate() {
            table.push_str(&format!(
                "[{}]={} ",
                unit.line * PER_LINE + k,
                quote(&unit.text)
            ));
        }
        counts.push_str(&format!("[{}]={} ", line[0].line, line.len()));
    }
    // The n-th read in a row on the same line (`k` counts them, `l` is the
    // line of the last read).
    let read = format!(
        "${{{TABLE}[LINENO*{PER_LINE}+({TABLE}_k=(LINENO=={TABLE}_l?{TABLE}_k+1:0),{TABLE}_l=LINENO,{TABLE}_k%{TABLE}_n[LINENO])]}}"
    );
    Ok(Plan {
        prefix: format!(
            "declare -a {TABLE}=({table}) {TABLE}_n=({counts}); {TABLE}_k=0 {TABLE}_l=0; : {underscore}; "
        ),
        script: Some(
            script
                .replace("${BASH_COMMAND}", &read)
                .replace("$BASH_COMMAND", &read),
        ),
    })
}

/// Table slots per line: a line holds fewer commands than this.
const PER_LINE: usize = 64;

/// What the runtime runs for a script reading `$BASH_COMMAND`.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Put in front of the script's first line.
    pub prefix: String,
    /// The script with each `$BASH_COMMAND` read through the counter, when
    /// a line holds several commands; `None`: the script as written.
    pub script: Option<String>,
}

/// Whether a trap handler reads `$BASH_COMMAND` exactly once each time it
/// runs (or never): its commands are simple commands in a plain sequence
/// and it is read as `$BASH_COMMAND` or `${BASH_COMMAND}`, outside `$(...)`.
fn reads_once(handler: &str, max_depth: usize, max_fuel: usize) -> bool {
    let n = references(handler);
    if n == 0 {
        return true;
    }
    let plain =
        handler.matches("$BASH_COMMAND").count() + handler.matches("${BASH_COMMAND}").count();
    if n != 1 || plain != 1 || handler.contains("$(") || handler.contains('`') {
        return false;
    }
    let Ok(ast) = Parser::with_limits(handler, max_depth, max_fuel).parse() else {
        return false;
    };
    fn sequence(command: &Command) -> bool {
        match command {
            Command::Simple(_) => true,
            Command::List(list) => {
                sequence(&list.first)
                    && list
                        .rest
                        .iter()
                        .all(|(op, c)| *op == ListOperator::Semicolon && sequence(c))
            }
            _ => false,
        }
    }
    ast.commands.iter().all(sequence)
}

/// Whether the script may print its traps (`trap`, `trap -p`), which would
/// show a handler rewritten to read through the counter.
fn lists_traps(script: &str) -> bool {
    script.contains("trap -p")
        || script.lines().any(|line| {
            line.split([';', '&', '|'])
                .any(|part| part.trim() == "trap")
        })
}

/// How often `$BASH_COMMAND` is read in `text` (`$BASH_COMMAND`,
/// `${BASH_COMMAND...}`, `${#BASH_COMMAND}`, `${!BASH_COMMAND}`).
pub(crate) fn references(text: &str) -> usize {
    let bytes = text.as_bytes();
    let name = "BASH_COMMAND";
    text.match_indices(name)
        .filter(|(start, _)| {
            let before = &text[..*start];
            let referenced = before.ends_with('$')
                || before.ends_with("${")
                || before.ends_with("${#")
                || before.ends_with("${!");
            let end = start + name.len();
            let whole = !bytes
                .get(end)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
            referenced && whole
        })
        .count()
}

/// Whether the script may turn on `DEBUG` inheritance (`set -T`, `set -o
/// functrace`, `shopt -s extdebug`, `declare -t`): then the trap also fires
/// inside `( )`, `$( )` and pipelines' subshells.
fn traced(script: &str) -> bool {
    script.contains("functrace")
        || script.contains("extdebug")
        || script.split_whitespace().any(|w| {
            (w.starts_with('-') || w.starts_with('+'))
                && !w.starts_with("--")
                && (w.contains('T') || w.contains('t'))
        })
}

/// The line and offset of every `[[` token, in order.
fn bracket_lines(text: &str) -> Vec<(usize, usize)> {
    let mut lexer = Lexer::new(text);
    let mut lines = Vec::new();
    while let Some(token) = lexer.next_spanned_token() {
        // bashkit does not export its token type; its `Debug` names the kind.
        if format!("{:?}", token.token) == "DoubleLeftBracket" {
            lines.push((token.span.start.line, token.span.start.offset));
        }
    }
    lines
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A command the `DEBUG` trap runs before.
struct Unit {
    line: usize,
    /// Position in source order within its line.
    order: usize,
    text: String,
    /// The command name of a simple command written as a literal.
    name: Option<String>,
    /// A `trap ... DEBUG` outside any loop, function or group.
    top_debug_trap: bool,
    /// It may not run each time the commands before it on its line run:
    /// in a branch of `if`/`case`, after `&&`/`||`/`&`, or a jump itself
    /// (`break`, `continue`, `return`, `exit`).
    skippable: bool,
}

#[derive(Default)]
struct Walk {
    traced: bool,
    units: Vec<Unit>,
    /// Indices in `units` of the `[[ ]]` commands, whose line comes from
    /// the lexer.
    brackets: Vec<Option<usize>>,
    /// The handler text of every `trap ... DEBUG`.
    handlers: Vec<String>,
    failed: Option<&'static str>,
    /// Inside a branch (see [`Unit::skippable`]).
    branch: usize,
    /// With inheritance on: each function's name, line, and start and end
    /// offsets.
    functions: Vec<(String, usize, usize, usize)>,
    /// The name of the next unit (see [`Unit::name`]).
    name: Option<String>,
    /// Inside a function body the trap does not run in.
    untraced: usize,
}

impl Walk {
    fn fail(&mut self, reason: &'static str) {
        self.failed.get_or_insert(reason);
    }

    fn unit(&mut self, line: usize, order: usize, text: String, top_debug_trap: bool) {
        if self.untraced > 0 {
            self.name = None;
            return;
        }
        let jump = ["break", "continue", "return", "exit"]
            .iter()
            .any(|j| text == *j || text.starts_with(&format!("{j} ")));
        self.units.push(Unit {
            line,
            order,
            name: self.name.take(),
            text,
            top_debug_trap,
            skippable: self.branch > 0 || jump,
        });
    }

    fn commands(&mut self, commands: &[Command], depth: usize) {
        for command in commands {
            self.command(command, depth);
        }
    }

    fn command(&mut self, command: &Command, depth: usize) {
        if self.failed.is_some() {
            return;
        }
        match command {
            Command::Simple(simple) => {
                let name = match simple.name.parts.as_slice() {
                    [WordPart::Literal(name)] => Some(name.as_str()),
                    _ => None,
                };
                if matches!(name, Some("eval" | "source" | ".")) {
                    return self.fail(why!("eval or source runs commands the runtime cannot read"));
                }
                let mut top_debug_trap = false;
                if name == Some("trap") {
                    let args: Vec<Option<&str>> = simple.args.iter().map(plain).collect();
                    let args = match args.first() {
                        Some(Some("--")) => &args[1..],
                        _ => &args[..],
                    };
                    if let [handler, signals @ ..] = args
                        && signals.contains(&Some("DEBUG"))
                    {
                        let handler = (*handler).unwrap_or_default();
                        if signals.len() > 1 && references(handler) > 0 {
                            return self.fail(why!("its trap handler serves other signals too"));
                        }
                        // The first trap set at the top level: the commands
                        // before it on its line run without it. A later one
                        // (or `trap - DEBUG`) runs with the trap set.
                        top_debug_trap = depth == 0 && self.handlers.is_empty() && handler != "-";
                        if self.untraced > 0 {
                            return self.fail(why!(
                                "a DEBUG trap set inside a function, where the runtime cannot \
                                 tell which commands it runs before"
                            ));
                        }
                        self.handlers.push(handler.to_string());
                    }
                }
                self.words(&simple.args);
                self.word(&simple.name);
                self.redirects(&simple.redirects);
                for assignment in &simple.assignments {
                    match &assignment.value {
                        AssignmentValue::Scalar(word) => self.word(word),
                        AssignmentValue::Array(words) => self.words(words),
                    }
                }
                let assigned = simple.assignments.iter().flat_map(|a| match &a.value {
                    AssignmentValue::Scalar(word) => std::slice::from_ref(word),
                    AssignmentValue::Array(words) => words.as_slice(),
                });
                let mut words = simple.args.iter().chain([&simple.name]).chain(assigned);
                if !words.all(reprinted_as_written) {
                    return self.fail(why!("a command substitution bash would print otherwise"));
                }
                let Some(text) = print_simple(simple) else {
                    return self.fail(why!("a command the runtime cannot print as bash does"));
                };
                let (line, order) = (simple.span.start.line, simple.span.start.offset);
                self.name = name.map(str::to_string);
                self.unit(line, order, text, top_debug_trap);
            }
            // bash runs the trap before each stage of a pipeline: stages
            // on one line are refused below as any two commands are.
            Command::Pipeline(pipeline) => self.commands(&pipeline.commands, depth),
            Command::List(list) => {
                self.command(&list.first, depth);
                for (op, command) in &list.rest {
                    let branch = *op != ListOperator::Semicolon;
                    self.branch += usize::from(branch);
                    self.command(command, depth);
                    self.branch -= usize::from(branch);
                }
            }
            // With inheritance on, bashkit runs the trap again as the body
            // starts, at the definition's line, where bash's value is the
            // calling command (placed after the walk, see `plan`).
            Command::Function(function) => {
                if self.traced {
                    self.functions.push((
                        function.name.clone(),
                        function.span.start.line,
                        function.span.start.offset,
                        function.span.end.offset,
                    ));
                }
                // Without inheritance the trap does not run inside a
                // function: its commands take no slot.
                self.untraced += usize::from(!self.traced);
                self.command(&function.body, depth + 1);
                self.untraced -= usize::from(!self.traced);
            }
            Command::Compound(compound, redirects) => {
                self.redirects(redirects);
                self.compound(compound, command, depth);
            }
        }
    }

    fn compound(&mut self, compound: &CompoundCommand, whole: &Command, depth: usize) {
        match compound {
            CompoundCommand::If(c) => {
                self.commands(&c.condition, depth + 1);
                self.branch += 1;
                self.commands(&c.then_branch, depth + 1);
                for (condition, branch) in &c.elif_branches {
                    self.commands(condition, depth + 1);
                    self.commands(branch, depth + 1);
                }
                if let Some(branch) = &c.else_branch {
                    self.commands(branch, depth + 1);
                }
                self.branch -= 1;
            }
            CompoundCommand::For(c) => {
                if let Some(words) = &c.words {
                    self.words(words);
                }
                match first_line(whole) {
                    Some(text) => {
                        let text = text.strip_suffix(';').unwrap_or(&text).to_string();
                        self.unit(c.span.start.line, c.span.start.offset, text, false);
                    }
                    None => {
                        return self.fail(why!("a command the runtime cannot print as bash does"));
                    }
                }
                self.commands(&c.body, depth + 1);
            }
            CompoundCommand::While(c) => {
                self.commands(&c.condition, depth + 1);
                self.commands(&c.body, depth + 1);
            }
            CompoundCommand::Until(c) => {
                self.commands(&c.condition, depth + 1);
                self.commands(&c.body, depth + 1);
            }
            CompoundCommand::Case(c) => {
                self.word(&c.word);
                match first_line(whole) {
                    Some(text) => self.unit(c.span.start.line, c.span.start.offset, text, false),
                    None => {
                        return self.fail(why!("a command the runtime cannot print as bash does"));
                    }
                }
                self.branch += 1;
                for item in &c.cases {
                    self.words(&item.patterns);
                    self.commands(&item.commands, depth + 1);
                }
                self.branch -= 1;
            }
            CompoundCommand::BraceGroup(commands) => self.commands(commands, depth + 1),
            CompoundCommand::Subshell(commands) => {
                if self.traced {
                    self.commands(commands, depth + 1);
                }
            }
            CompoundCommand::Conditional(words) => {
                self.words(words);
                let Some(text) = print(whole) else {
                    return self.fail(why!("a command the runtime cannot print as bash does"));
                };
                // The line and offset are the lexer's (see `plan`); one in a
                // function the trap does not run in takes no slot.
                self.brackets
                    .push((self.untraced == 0).then_some(self.units.len()));
                self.unit(0, 0, text, false);
            }
            CompoundCommand::Arithmetic(_)
            | CompoundCommand::ArithmeticFor(_)
            | CompoundCommand::Select(_)
            | CompoundCommand::Coproc(_)
            | CompoundCommand::Time(_) => self.fail(why!(
                "(( )), for (( )), select, coproc or time, whose line the runtime cannot place"
            )),
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

    /// Commands inside a word run in a subshell, where the trap fires only
    /// with inheritance on.
    fn word(&mut self, word: &Word) {
        for part in &word.parts {
            match part {
                WordPart::CommandSubstitution(commands)
                | WordPart::ProcessSubstitution { commands, .. }
                    if self.traced && !commands.is_empty() =>
                {
                    self.fail(why!("a command substitution the DEBUG trap may run inside"))
                }
                WordPart::CompoundAssignment { elements, .. } => self.words(elements),
                _ => {}
            }
        }
    }
}

/// A word that is one literal, as the script means it.
fn plain(word: &Word) -> Option<&str> {
    match word.parts.as_slice() {
        [WordPart::Literal(text)] => Some(text),
        [] => Some(""),
        _ => None,
    }
}

/// Whether bash prints `word` as written: bash prints the commands of a
/// `$(...)` again from their syntax tree (`$(echo  b)` as `$(echo b)`),
/// which gives the written text back only for one plain command with
/// single spaces.
fn reprinted_as_written(word: &Word) -> bool {
    let Some(raw) = &word.raw else {
        return true;
    };
    let mut rest = raw.as_str();
    while let Some(at) = rest.find("$(") {
        let inner = &rest[at + 2..];
        let end = inner.find(')').unwrap_or(inner.len());
        let body = &inner[..end];
        let plain = body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _\"'$.-/=:,+@%^{}".contains(c))
            && !body.contains("  ")
            && !body.starts_with(' ')
            && !body.ends_with(' ');
        if !plain {
            return false;
        }
        rest = &inner[end..];
    }
    true
}

/// `command` as bash prints it (`$BASH_COMMAND`'s value for a simple
/// command or `[[ ]]`), through bashkit's port of bash's printer: the
/// command is printed as the body of a function and the body's lines
/// taken back out.
fn print(command: &Command) -> Option<String> {
    let body = Command::Compound(
        CompoundCommand::BraceGroup(vec![command.clone()]),
        Vec::new(),
    );
    let printed = function_string("f", &body);
    let inner = printed.strip_prefix("f () \n{ \n")?.strip_suffix("\n}")?;
    let lines: Vec<&str> = inner
        .split('\n')
        .map(|line| line.strip_prefix("    ").unwrap_or(line))
        .collect();
    Some(lines.join("\n"))
}

/// A simple command as bash prints it: [`print`], and bash's `1>&2` and
/// `0<&3` for a duplication written without its descriptor, which the
/// printer of `declare -f` leaves out. Only the redirections are touched:
/// the words are printed without them first, and the rest is theirs.
fn print_simple(simple: &SimpleCommand) -> Option<String> {
    let full = print(&Command::Simple(simple.clone()))?;
    let mut bare = simple.clone();
    bare.redirects.clear();
    let words = print(&Command::Simple(bare))?;
    let redirects = full.strip_prefix(words.as_str())?;
    Some(format!(
        "{words}{}",
        redirects.replace(" >&", " 1>&").replace(" <&", " 0<&")
    ))
}

/// The first line bash prints for a compound command (`for i in 1 2;`,
/// `case $x in `).
fn first_line(command: &Command) -> Option<String> {
    print(command)?.split('\n').next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(script: &str) -> Result<String, &'static str> {
        plan(script, 100, 100_000).map(|p| p.prefix)
    }

    #[test]
    fn each_line_gets_the_text_bash_prints() {
        let prefix = table(
            "trap 'echo \"[$BASH_COMMAND]\"' DEBUG; echo a\nx=$(echo b)\necho \"$x\" >/dev/null 2>&1\nfor i in 1 2; do\n  echo $i >&2\ndone\n[[ -n a ]]\ncase a in\n a) echo c;;\nesac",
        )
        .unwrap();
        println!("{prefix}");
        assert!(prefix.contains("[1]='echo a'"), "{prefix}");
        assert!(
            prefix.contains("[3]='echo \"$x\" > /dev/null 2>&1'"),
            "{prefix}"
        );
        assert!(prefix.contains("[4]='for i in 1 2'"), "{prefix}");
        assert!(prefix.contains("[5]='echo $i 1>&2'"), "{prefix}");
        assert!(prefix.contains("[2]='x=$(echo b)'"), "{prefix}");
        assert!(prefix.contains("[7]='[[ -n a ]]'"), "{prefix}");
        assert!(prefix.contains("[8]='case a in '"), "{prefix}");
    }

    #[test]
    fn lines_with_several_commands_read_through_a_counter() {
        let plan = plan(
            "trap 'echo \"[$BASH_COMMAND]\"' DEBUG\necho a | cat; echo b",
            100,
            100_000,
        )
        .unwrap();
        assert!(
            plan.prefix
                .contains("[128]='echo a' [129]='cat' [130]='echo b'"),
            "{}",
            plan.prefix
        );
        assert!(plan.prefix.contains("_n=([2]=3 )"), "{}", plan.prefix);
        let script = plan.script.unwrap();
        assert!(!script.contains("$BASH_COMMAND"), "{script}");
    }

    #[test]
    fn a_double_bracket_takes_its_place_on_its_line() {
        let plan = plan(
            "trap 'echo \"[$BASH_COMMAND]\"' DEBUG\necho a; [[ -n a ]]; echo b\nf() { [[ x ]]; }\n[[ y ]]",
            100,
            100_000,
        )
        .unwrap();
        assert!(
            plan.prefix
                .contains("[128]='echo a' [129]='[[ -n a ]]' [130]='echo b' [256]='[[ -n y ]]'"),
            "{}",
            plan.prefix
        );
    }

    #[test]
    fn a_handler_writing_to_stderr_is_planned_and_duplications_print_as_bash_does() {
        let prefix =
            table("trap 'echo \"[$BASH_COMMAND]\" >&2' DEBUG\necho '>&2' >&2 <&0").unwrap();
        assert!(
            prefix.contains(r"[2]='echo '\''>&2'\'' 1>&2 0<&0'"),
            "{prefix}"
        );
    }

    #[test]
    fn lines_with_two_commands_are_not_planned() {
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\ntrue && echo b").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\nif true; then echo a; fi").is_err());
        assert!(table("trap 'echo $BASH_COMMAND $BASH_COMMAND' DEBUG\necho a | cat").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\ntrap -p\necho a | cat").is_err());
        assert!(table("trap '[[ -n $BASH_COMMAND ]] && echo x' DEBUG\necho a | cat").is_err());
        assert!(table("echo $BASH_COMMAND").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\nx=$(echo  b)").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\neval 'echo a'").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG\n(( x = 1 ))").is_err());
        assert!(table("trap 'echo $BASH_COMMAND' DEBUG ERR\necho a").is_err());
        assert!(
            table("set -T\ntrap 'echo $BASH_COMMAND' DEBUG\nf() {\n  echo a\n}\nf\nf 1").is_err()
        );
        assert!(table("set -T\ntrap 'echo $BASH_COMMAND' DEBUG\nf() { echo a; }; f").is_err());
        assert!(table("shopt -s extdebug\ntrap 'echo $BASH_COMMAND' DEBUG\necho a").is_err());
    }
}
