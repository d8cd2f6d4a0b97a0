//! The grammar of `test` and `[`: argument words to an expression tree.
//!
//! Follows POSIX `test` (XCU "test", the rules by argument count for up to
//! four arguments) and bash's extensions beyond four (`-a` binds tighter
//! than `-o`, `!` and parentheses nest), as bash 5.2 parses them. Nothing
//! is evaluated here.

/// One parsed `test` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expr {
    /// A lone word: true when non-empty.
    Word(String),
    /// A unary primary: operator (`-f`, `-z`, ...) and operand.
    Unary(String, String),
    /// A binary primary: left operand, operator (`=`, `-nt`, ...), right operand.
    Binary(String, String, String),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// A syntax error, as the text after `test: ` (bash exits 2 with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError(pub String);

/// Unary operators bash's `test` knows.
pub(crate) fn is_unary(op: &str) -> bool {
    matches!(
        op,
        "-a" | "-b"
            | "-c"
            | "-d"
            | "-e"
            | "-f"
            | "-g"
            | "-h"
            | "-k"
            | "-p"
            | "-r"
            | "-s"
            | "-t"
            | "-u"
            | "-w"
            | "-x"
            | "-G"
            | "-L"
            | "-N"
            | "-O"
            | "-S"
            | "-n"
            | "-z"
            | "-o"
            | "-v"
            | "-R"
    )
}

/// Binary operators bash's `test` knows (`-a`/`-o` are connectives, handled apart).
pub(crate) fn is_binary(op: &str) -> bool {
    matches!(
        op,
        "=" | "=="
            | "!="
            | "<"
            | ">"
            | "-eq"
            | "-ne"
            | "-lt"
            | "-le"
            | "-gt"
            | "-ge"
            | "-nt"
            | "-ot"
            | "-ef"
    )
}

/// Parses the arguments of `test` (for `[`, without the closing `]`).
pub(crate) fn parse(args: &[String]) -> Result<Expr, SyntaxError> {
    let word = |s: &String| Expr::Word(s.clone());
    match args {
        [] => Ok(Expr::Word(String::new())),
        [a] => Ok(word(a)),
        [bang, a] if bang == "!" => Ok(Expr::Not(Box::new(word(a)))),
        [op, a] if is_unary(op) => Ok(Expr::Unary(op.clone(), a.clone())),
        [op, _] => Err(SyntaxError(format!("{op}: unary operator expected"))),
        [a, op, b] if is_binary(op) => Ok(Expr::Binary(a.clone(), op.clone(), b.clone())),
        [a, op, b] if op == "-a" => Ok(Expr::And(Box::new(word(a)), Box::new(word(b)))),
        [a, op, b] if op == "-o" => Ok(Expr::Or(Box::new(word(a)), Box::new(word(b)))),
        [bang, rest @ ..] if bang == "!" && args.len() <= 4 => {
            Ok(Expr::Not(Box::new(parse(rest)?)))
        }
        [open, inner @ .., close] if open == "(" && close == ")" && args.len() <= 4 => parse(inner),
        [_, op, _] => Err(SyntaxError(format!("{op}: binary operator expected"))),
        _ => {
            let mut p = Parser { args, at: 0 };
            let expr = p.or()?;
            match p.peek() {
                None => Ok(expr),
                Some(_) => Err(SyntaxError("too many arguments".into())),
            }
        }
    }
}

/// Recursive descent over five or more arguments.
struct Parser<'a> {
    args: &'a [String],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.args.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Option<String> {
        let a = self.args.get(self.at).cloned();
        self.at += 1;
        a
    }

    fn or(&mut self) -> Result<Expr, SyntaxError> {
        let mut left = self.and()?;
        while self.peek() == Some("-o") {
            self.at += 1;
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, SyntaxError> {
        let mut left = self.not()?;
        while self.peek() == Some("-a") {
            self.at += 1;
            left = Expr::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, SyntaxError> {
        if self.peek() == Some("!") {
            self.at += 1;
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.primary()
    }

    /// A parenthesised expression, else a binary primary, else a unary
    /// one, else a word: bash's order, so `( = )` among five or more
    /// arguments is the word `=` in parentheses, not a comparison.
    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        let Some(first) = self.next() else {
            return Err(SyntaxError("argument expected".into()));
        };
        if first == "(" {
            let inner = self.or()?;
            return match self.next() {
                Some(close) if close == ")" => Ok(inner),
                _ => Err(SyntaxError("`)' expected".into())),
            };
        }
        if let Some(op) = self.args.get(self.at)
            && is_binary(op)
            && self.args.len() > self.at + 1
        {
            let op = op.clone();
            self.at += 1;
            let right = self.next().unwrap_or_default();
            return Ok(Expr::Binary(first, op, right));
        }
        if is_unary(&first) {
            return match self.next() {
                Some(operand) => Ok(Expr::Unary(first, operand)),
                None => Err(SyntaxError("argument expected".into())),
            };
        }
        Ok(Expr::Word(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &str) -> Result<Expr, SyntaxError> {
        let args: Vec<String> = words.split_whitespace().map(String::from).collect();
        parse(&args)
    }

    fn w(s: &str) -> Box<Expr> {
        Box::new(Expr::Word(s.into()))
    }

    fn u(op: &str, a: &str) -> Box<Expr> {
        Box::new(Expr::Unary(op.into(), a.into()))
    }

    #[test]
    fn posix_rules_by_argument_count() {
        assert_eq!(p(""), Ok(Expr::Word(String::new())));
        assert_eq!(p("-f"), Ok(Expr::Word("-f".into())));
        assert_eq!(p("! x"), Ok(Expr::Not(w("x"))));
        assert_eq!(p("-L x"), Ok(*u("-L", "x")));
        assert_eq!(
            p("-q x"),
            Err(SyntaxError("-q: unary operator expected".into()))
        );
        // With three arguments a binary operator wins over a leading `!`.
        assert_eq!(
            p("! = x"),
            Ok(Expr::Binary("!".into(), "=".into(), "x".into()))
        );
        assert_eq!(p("a -a b"), Ok(Expr::And(w("a"), w("b"))));
        assert_eq!(p("! -e x"), Ok(Expr::Not(u("-e", "x"))));
        assert_eq!(p("( x )"), Ok(Expr::Word("x".into())));
        assert_eq!(
            p("a b c"),
            Err(SyntaxError("b: binary operator expected".into()))
        );
        assert_eq!(
            p("! a = b"),
            Ok(Expr::Not(Box::new(Expr::Binary(
                "a".into(),
                "=".into(),
                "b".into()
            ))))
        );
        assert_eq!(p("( -z x )"), Ok(*u("-z", "x")));
    }

    #[test]
    fn longer_expressions_bind_and_tighter_than_or() {
        assert_eq!(
            p("-e a -o -f b -a -d c"),
            Ok(Expr::Or(
                u("-e", "a"),
                Box::new(Expr::And(u("-f", "b"), u("-d", "c")))
            ))
        );
        assert_eq!(
            p("( -e a -o -e b ) -a ! -L c"),
            Ok(Expr::And(
                Box::new(Expr::Or(u("-e", "a"), u("-e", "b"))),
                Box::new(Expr::Not(u("-L", "c")))
            ))
        );
        assert_eq!(
            p("a b c d e"),
            Err(SyntaxError("too many arguments".into()))
        );
        assert_eq!(p("( -e a -a -e b"), Err(SyntaxError("`)' expected".into())));
    }
}
