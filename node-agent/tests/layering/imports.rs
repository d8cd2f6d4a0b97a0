//! What one source file of the node agent's library refers to inside the
//! crate, read with syn: every `use` tree and every path rooted at `crate`,
//! `super`, `self` or a child module, outside `#[cfg(test)]` items.

use std::collections::HashMap;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// One parsed file.
pub struct Parsed {
    /// Path under `src/`, `/`-separated (`registry/lease.rs`).
    pub rel: String,
    /// The file's module path under the crate root (`["registry", "lease"]`;
    /// `[]` for `lib.rs`).
    pub module: Vec<String>,
    /// Paths the file names, made absolute where the root says how
    /// (`crate`, `self`, `super`), with the 1-based line they start on.
    /// A path whose first segment is a plain name keeps it as written
    /// ([`Root::Plain`]); the checker decides whether it is a child module.
    pub refs: Vec<Reference>,
    /// Names brought in by `use` (the alias if any) and what they stand for;
    /// lets the checker follow re-exports (`pub use lease::Lease`).
    pub uses: HashMap<String, Reference>,
    /// Lines of the file not counting `#[cfg(test)]` items.
    pub counted_lines: usize,
}

/// How a path starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Root {
    /// Absolute under the crate root (`crate::`, or `self`/`super` resolved).
    Crate,
    /// A plain first segment, relative to `scope` if it names a child module
    /// of it (2018 paths: `use lease::Lease;` in `registry/mod.rs`).
    Plain { scope: Vec<String> },
}

/// One path the file names.
#[derive(Clone, Debug)]
pub struct Reference {
    pub root: Root,
    pub segments: Vec<String>,
    pub line: usize,
}

/// Reads `text` (the file at `rel` under `src/`). Errors: the text is not
/// Rust syn can parse, named by `rel`.
pub fn parse(rel: &str, text: &str) -> Result<Parsed, String> {
    let file = syn::parse_file(text)
        .map_err(|e| format!("{rel}:{}: not parseable: {e}", e.span().start().line))?;
    let module = module_path(rel);
    let mut collector = Collector {
        scope: module.clone(),
        refs: Vec::new(),
        uses: HashMap::new(),
        test_lines: Vec::new(),
    };
    collector.visit_file(&file);
    let total = text.lines().count();
    let mut excluded = vec![false; total + 1];
    for (start, end) in &collector.test_lines {
        let end = (*end).min(total);
        if *start <= end {
            excluded[*start..=end].fill(true);
        }
    }
    let counted_lines = (1..=total).filter(|l| !excluded[*l]).count();
    Ok(Parsed {
        rel: rel.to_string(),
        module,
        refs: collector.refs,
        uses: collector.uses,
        counted_lines,
    })
}

/// The module path of the file at `rel` under `src/`: `lib.rs` and
/// `main.rs` are roots, `a/mod.rs` and `a.rs` are `a`.
pub fn module_path(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    if stem == "lib" || stem == "main" {
        return Vec::new();
    }
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    stem.split('/').map(str::to_string).collect()
}

struct Collector {
    /// The module the visitor is in: the file's, plus inline modules.
    scope: Vec<String>,
    refs: Vec<Reference>,
    uses: HashMap<String, Reference>,
    /// 1-based inclusive line ranges of `#[cfg(test)]` items.
    test_lines: Vec<(usize, usize)>,
}

/// Whether `attrs` hold `#[cfg(test)]`.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

impl Collector {
    /// Makes `segments` (as written) a reference, or `None` for a one-word
    /// path or one that leaves the crate root with `super`.
    fn reference(&self, segments: Vec<String>, line: usize) -> Option<Reference> {
        let first = segments.first()?.as_str();
        match first {
            "crate" => Some(Reference {
                root: Root::Crate,
                segments: segments[1..].to_vec(),
                line,
            }),
            "self" | "super" => {
                let mut base = self.scope.clone();
                let mut rest = &segments[..];
                if rest[0] == "self" {
                    rest = &rest[1..];
                }
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                Some(Reference {
                    root: Root::Crate,
                    segments: base,
                    line,
                })
            }
            _ if segments.len() > 1 => Some(Reference {
                root: Root::Plain {
                    scope: self.scope.clone(),
                },
                segments,
                line,
            }),
            _ => None,
        }
    }

    /// Flattens a `use` tree below `prefix`.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident, &n.ident),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident, &r.rename),
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                if let Some(r) = self.reference(prefix.clone(), line) {
                    self.refs.push(r);
                }
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident, alias: &syn::Ident) {
        let mut segments = prefix.to_vec();
        // `use crate::registry::{self, Registry}`: `self` names the prefix.
        if ident != "self" {
            segments.push(ident.to_string());
        }
        let line = ident.span().start().line;
        let name = if alias == "self" {
            prefix.last().cloned().unwrap_or_default()
        } else {
            alias.to_string()
        };
        // A one-word `use` (`use lease;`) names a child module of the scope.
        let reference =
            if segments.len() == 1 && !matches!(segments[0].as_str(), "crate" | "self" | "super") {
                Some(Reference {
                    root: Root::Plain {
                        scope: self.scope.clone(),
                    },
                    segments,
                    line,
                })
            } else {
                self.reference(segments, line)
            };
        if let Some(r) = reference {
            self.uses.insert(name, r.clone());
            self.refs.push(r);
        }
    }

    /// Paths rooted at `crate` inside a macro's tokens (`format!`,
    /// `tracing::info!` bodies are not parsed as Rust by syn).
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let flat = flatten(tokens);
        let mut i = 0;
        while i < flat.len() {
            if let TokenTree::Ident(id) = &flat[i]
                && id == "crate"
            {
                let line = id.span().start().line;
                let mut segments = vec!["crate".to_string()];
                let mut j = i + 1;
                while j + 2 < flat.len() && is_punct(&flat[j], ':') && is_punct(&flat[j + 1], ':') {
                    match &flat[j + 2] {
                        TokenTree::Ident(next) => segments.push(next.to_string()),
                        _ => break,
                    }
                    j += 3;
                }
                if let Some(r) = self.reference(segments, line) {
                    self.refs.push(r);
                }
                i = j;
                continue;
            }
            i += 1;
        }
    }

    fn skip_test(&mut self, attrs: &[syn::Attribute], span: proc_macro2::Span) -> bool {
        if is_test_only(attrs) {
            let start = attrs
                .iter()
                .map(|a| a.pound_token.span.start().line)
                .min()
                .unwrap_or(span.start().line);
            self.test_lines.push((start, span.end().line));
            true
        } else {
            false
        }
    }
}

fn is_punct(t: &TokenTree, c: char) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == c)
}

fn flatten(tokens: TokenStream) -> Vec<TokenTree> {
    let mut out = Vec::new();
    for t in tokens {
        match t {
            TokenTree::Group(g) => out.extend(flatten(g.stream())),
            other => out.push(other),
        }
    }
    out
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        use syn::spanned::Spanned;
        if self.skip_test(item_attrs(item), item.span()) {
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        use syn::spanned::Spanned;
        let attrs: &[syn::Attribute] = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if self.skip_test(attrs, item.span()) {
            return;
        }
        visit::visit_impl_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            self.scope.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.scope.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        self.use_tree(&mut prefix, &u.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            if let Some(r) = self.reference(segments, line) {
                self.refs.push(r);
            }
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_tokens(mac.tokens.clone());
    }

    // `pub(in crate::registry)` names where an item is visible, not a use.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    // Doc comments (intra-doc links) and `cfg`/`derive` are not uses.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}
