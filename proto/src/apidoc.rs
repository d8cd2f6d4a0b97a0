//! Markdown reference of the gRPC API, rendered from the comments of the
//! `.proto` files.
//!
//! The input is a `FileDescriptorSet` with source code info, as `protox`
//! produces it in `build.rs` ([`crate::FILE_DESCRIPTOR_SET`]). Comments are
//! found through `SourceCodeInfo.Location.path`: a list of field numbers and
//! indexes from `google/protobuf/descriptor.proto` leading from the
//! `FileDescriptorProto` to one element. The numbers used here, as
//! google/protobuf/descriptor.proto defines them (they never change: they
//! are the wire format of every descriptor):
//!
//! | path step                              | field number |
//! |----------------------------------------|--------------|
//! | `FileDescriptorProto.package`          | 2            |
//! | `FileDescriptorProto.message_type`     | 4            |
//! | `FileDescriptorProto.enum_type`        | 5            |
//! | `FileDescriptorProto.service`          | 6            |
//! | `FileDescriptorProto.syntax`           | 12           |
//! | `DescriptorProto.field`                | 2            |
//! | `DescriptorProto.nested_type`          | 3            |
//! | `DescriptorProto.enum_type`            | 4            |
//! | `EnumDescriptorProto.value`            | 2            |
//! | `ServiceDescriptorProto.method`        | 2            |
//!
//! The output lists the services with each RPC (request → response,
//! streaming marked, its comment), then every message with a table of its
//! fields, then every enum with its values, in the order of the files.
//! Headings are the anchors of cross-links: a field whose type is a message
//! or an enum of the set links to its section. Anchors follow GitHub's
//! heading slugs (lowercase; characters other than letters, digits, `-`,
//! `_` and spaces dropped; spaces become `-`); [`render`] fails rather than
//! produce two headings with the same anchor.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    FileDescriptorSet, ServiceDescriptorProto,
};

// Field numbers of google/protobuf/descriptor.proto (see the module docs).
const FILE_PACKAGE: i32 = 2;
const FILE_MESSAGE_TYPE: i32 = 4;
const FILE_ENUM_TYPE: i32 = 5;
const FILE_SERVICE: i32 = 6;
const FILE_SYNTAX: i32 = 12;
const MESSAGE_FIELD: i32 = 2;
const MESSAGE_NESTED_TYPE: i32 = 3;
const MESSAGE_ENUM_TYPE: i32 = 4;
const ENUM_VALUE: i32 = 2;
const SERVICE_METHOD: i32 = 2;

/// Why the reference could not be rendered.
#[derive(Debug)]
pub struct ApiDocError(String);

impl fmt::Display for ApiDocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ApiDocError {}

/// The reference of this crate's API (`agentcomputer.v1`), as committed in
/// `docs/api.md`.
///
/// Errors: only if the descriptor set embedded at build time cannot be
/// decoded or rendered, which the crate's tests rule out.
pub fn render_api() -> Result<String, ApiDocError> {
    let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET)
        .map_err(|e| ApiDocError(format!("the embedded descriptor set does not decode: {e}")))?;
    render(&set)
}

/// Renders the reference of every file of `set` as Markdown.
///
/// Errors: two headings would get the same anchor (for example a message
/// `FooBar` next to an RPC `Foo.Bar`), so a link would be ambiguous.
pub fn render(set: &FileDescriptorSet) -> Result<String, ApiDocError> {
    let types = TypeIndex::new(&set.file);
    let mut doc = Doc::default();
    let packages: Vec<&str> = set.file.iter().map(|f| f.package()).collect();
    let mut title_packages = packages.clone();
    title_packages.dedup();
    doc.heading(1, &format!("{} API reference", title_packages.join(", ")))?;
    doc.line(
        "<!-- Generated from the .proto comments by `cargo run -p agentcomputer-proto --bin api-doc > docs/api.md`; do not edit by hand. -->",
    );
    doc.blank();
    for file in &set.file {
        let comments = Comments::new(file);
        doc.line(&format!(
            "Source: `{}`, package `{}`.",
            file.name(),
            file.package()
        ));
        doc.blank();
        for path in [[FILE_SYNTAX], [FILE_PACKAGE]] {
            if let Some(text) = comments.get(&path) {
                doc.paragraph(&text);
            }
        }
    }
    contents(&mut doc, set);

    doc.heading(2, "Services")?;
    for file in &set.file {
        let comments = Comments::new(file);
        for (i, service) in file.service.iter().enumerate() {
            render_service(
                &mut doc,
                &types,
                &comments,
                service,
                &[FILE_SERVICE, i as i32],
            )?;
        }
    }

    doc.heading(2, "Messages")?;
    for file in &set.file {
        let comments = Comments::new(file);
        for (i, message) in file.message_type.iter().enumerate() {
            render_message(
                &mut doc,
                &types,
                &comments,
                "",
                message,
                vec![FILE_MESSAGE_TYPE, i as i32],
            )?;
        }
    }

    doc.heading(2, "Enums")?;
    for file in &set.file {
        let comments = Comments::new(file);
        for (i, e) in file.enum_type.iter().enumerate() {
            render_enum(
                &mut doc,
                &comments,
                e.name(),
                e,
                &[FILE_ENUM_TYPE, i as i32],
            )?;
        }
        // Enums nested in messages, after the top-level ones.
        for (i, message) in file.message_type.iter().enumerate() {
            nested_enums(
                &mut doc,
                &comments,
                message.name(),
                message,
                vec![FILE_MESSAGE_TYPE, i as i32],
            )?;
        }
    }
    Ok(doc.finish())
}

/// One line per section: the links to every service, RPC, message and enum.
fn contents(doc: &mut Doc, set: &FileDescriptorSet) {
    doc.line("Contents:");
    doc.blank();
    for file in &set.file {
        for s in &file.service {
            let rpcs: Vec<String> = s
                .method
                .iter()
                .map(|m| link(m.name(), &slug(&format!("{}.{}", s.name(), m.name()))))
                .collect();
            doc.line(&format!(
                "- service {}: {}",
                link(s.name(), &slug(s.name())),
                rpcs.join(" · ")
            ));
        }
    }
    let mut messages = Vec::new();
    let mut enums = Vec::new();
    for file in &set.file {
        fn walk(
            prefix: &str,
            m: &DescriptorProto,
            messages: &mut Vec<String>,
            enums: &mut Vec<String>,
        ) {
            if is_map_entry(m) {
                return;
            }
            let name = qualified(prefix, m.name());
            messages.push(link(&name, &slug(&name)));
            for n in &m.nested_type {
                walk(&name, n, messages, enums);
            }
            for e in &m.enum_type {
                let en = qualified(&name, e.name());
                enums.push(link(&en, &slug(&en)));
            }
        }
        for m in &file.message_type {
            walk("", m, &mut messages, &mut enums);
        }
        let mut top: Vec<String> = file
            .enum_type
            .iter()
            .map(|e| link(e.name(), &slug(e.name())))
            .collect();
        top.append(&mut enums);
        enums = top;
    }
    doc.line(&format!("- messages: {}", messages.join(" · ")));
    doc.line(&format!("- enums: {}", enums.join(" · ")));
    doc.blank();
}

fn render_service(
    doc: &mut Doc,
    types: &TypeIndex,
    comments: &Comments,
    service: &ServiceDescriptorProto,
    path: &[i32],
) -> Result<(), ApiDocError> {
    doc.heading(3, service.name())?;
    if let Some(text) = comments.get(path) {
        doc.paragraph(&text);
    }
    for (i, method) in service.method.iter().enumerate() {
        doc.heading(4, &format!("{}.{}", service.name(), method.name()))?;
        let stream = |yes: bool| if yes { "stream " } else { "" };
        doc.line(&format!(
            "{}{} → {}{}",
            stream(method.client_streaming()),
            types.link(method.input_type()),
            stream(method.server_streaming()),
            types.link(method.output_type()),
        ));
        doc.blank();
        let mut method_path = path.to_vec();
        method_path.extend([SERVICE_METHOD, i as i32]);
        if let Some(text) = comments.get(&method_path) {
            doc.paragraph(&text);
        }
        if method.options.as_ref().is_some_and(|o| o.deprecated()) {
            doc.paragraph("Deprecated.");
        }
    }
    Ok(())
}

fn render_message(
    doc: &mut Doc,
    types: &TypeIndex,
    comments: &Comments,
    prefix: &str,
    message: &DescriptorProto,
    path: Vec<i32>,
) -> Result<(), ApiDocError> {
    if is_map_entry(message) {
        // Shown as `map<K, V>` in the field that uses it.
        return Ok(());
    }
    let name = qualified(prefix, message.name());
    doc.heading(3, &name)?;
    if let Some(text) = comments.get(&path) {
        doc.paragraph(&text);
    }
    if message.field.is_empty() {
        doc.paragraph("No fields.");
    } else {
        doc.line("| Field | Type | Number | Label | Description |");
        doc.line("|-------|------|--------|-------|-------------|");
        for (i, field) in message.field.iter().enumerate() {
            let mut field_path = path.clone();
            field_path.extend([MESSAGE_FIELD, i as i32]);
            let mut text = comments.get(&field_path).unwrap_or_default();
            if field.options.as_ref().is_some_and(|o| o.deprecated()) {
                text.push_str(if text.is_empty() {
                    "Deprecated."
                } else {
                    "\n\nDeprecated."
                });
            }
            doc.line(&format!(
                "| `{}` | {} | {} | {} | {} |",
                field.name(),
                types.field_type(field),
                field.number(),
                label(message, field, types),
                cell(&text),
            ));
        }
        doc.blank();
    }
    for (i, nested) in message.nested_type.iter().enumerate() {
        let mut nested_path = path.clone();
        nested_path.extend([MESSAGE_NESTED_TYPE, i as i32]);
        render_message(doc, types, comments, &name, nested, nested_path)?;
    }
    Ok(())
}

/// Renders the enums declared inside `message` and inside its nested
/// messages, depth first.
fn nested_enums(
    doc: &mut Doc,
    comments: &Comments,
    name: &str,
    message: &DescriptorProto,
    path: Vec<i32>,
) -> Result<(), ApiDocError> {
    for (i, e) in message.enum_type.iter().enumerate() {
        let mut enum_path = path.clone();
        enum_path.extend([MESSAGE_ENUM_TYPE, i as i32]);
        render_enum(doc, comments, &qualified(name, e.name()), e, &enum_path)?;
    }
    for (i, nested) in message.nested_type.iter().enumerate() {
        let mut nested_path = path.clone();
        nested_path.extend([MESSAGE_NESTED_TYPE, i as i32]);
        nested_enums(
            doc,
            comments,
            &qualified(name, nested.name()),
            nested,
            nested_path,
        )?;
    }
    Ok(())
}

fn render_enum(
    doc: &mut Doc,
    comments: &Comments,
    name: &str,
    e: &EnumDescriptorProto,
    path: &[i32],
) -> Result<(), ApiDocError> {
    doc.heading(3, name)?;
    if let Some(text) = comments.get(path) {
        doc.paragraph(&text);
    }
    doc.line("| Value | Number | Description |");
    doc.line("|-------|--------|-------------|");
    for (i, value) in e.value.iter().enumerate() {
        let mut value_path = path.to_vec();
        value_path.extend([ENUM_VALUE, i as i32]);
        let text = comments.get(&value_path).unwrap_or_default();
        doc.line(&format!(
            "| `{}` | {} | {} |",
            value.name(),
            value.number(),
            cell(&text)
        ));
    }
    doc.blank();
    Ok(())
}

/// The Label column: `repeated`, `optional` (proto3 `optional`), `oneof
/// NAME`, or empty for a singular field. Map fields are repeated entries
/// on the wire but show as `map<K, V>` in the Type column, with no label.
fn label(message: &DescriptorProto, field: &FieldDescriptorProto, types: &TypeIndex) -> String {
    if field.proto3_optional() {
        return "optional".into();
    }
    if let Some(i) = field.oneof_index {
        let name = message
            .oneof_decl
            .get(i as usize)
            .map(|o| o.name())
            .unwrap_or("?");
        return format!("oneof `{name}`");
    }
    match field.label() {
        Label::Repeated if types.map_entry(field).is_some() => String::new(),
        Label::Repeated => "repeated".into(),
        Label::Required => "required".into(),
        Label::Optional => String::new(),
    }
}

fn is_map_entry(m: &DescriptorProto) -> bool {
    m.options.as_ref().is_some_and(|o| o.map_entry())
}

fn qualified(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Every message and enum of the set by its full name (`.pkg.Outer.Inner`),
/// with the name shown in the reference (`Outer.Inner`).
struct TypeIndex<'a> {
    shown: HashMap<String, String>,
    messages: HashMap<String, &'a DescriptorProto>,
}

impl<'a> TypeIndex<'a> {
    fn new(files: &'a [FileDescriptorProto]) -> Self {
        let mut index = TypeIndex {
            shown: HashMap::new(),
            messages: HashMap::new(),
        };
        for file in files {
            let scope = if file.package().is_empty() {
                String::new()
            } else {
                format!(".{}", file.package())
            };
            for m in &file.message_type {
                index.add_message(&scope, "", m);
            }
            for e in &file.enum_type {
                index
                    .shown
                    .insert(format!("{scope}.{}", e.name()), e.name().to_string());
            }
        }
        index
    }

    fn add_message(&mut self, scope: &str, prefix: &str, m: &'a DescriptorProto) {
        let shown = qualified(prefix, m.name());
        let full = format!("{scope}.{shown}");
        for n in &m.nested_type {
            self.add_message(scope, &shown, n);
        }
        for e in &m.enum_type {
            let en = qualified(&shown, e.name());
            self.shown.insert(format!("{scope}.{en}"), en);
        }
        self.messages.insert(full.clone(), m);
        self.shown.insert(full, shown);
    }

    /// A link to the section of a message or enum; a type outside the set
    /// (an import not rendered) is shown by its full name, unlinked.
    fn link(&self, full_name: &str) -> String {
        match self.shown.get(full_name) {
            Some(shown) => link(shown, &slug(shown)),
            None => format!("`{}`", full_name.trim_start_matches('.')),
        }
    }

    /// The key and value fields of a map field's entry message.
    fn map_entry(
        &self,
        field: &FieldDescriptorProto,
    ) -> Option<(&'a FieldDescriptorProto, &'a FieldDescriptorProto)> {
        if field.label() != Label::Repeated || field.r#type() != Type::Message {
            return None;
        }
        let entry = self.messages.get(field.type_name())?;
        if !is_map_entry(entry) {
            return None;
        }
        // descriptor.proto: a map entry has the key as field 1 and the value
        // as field 2.
        let key = entry.field.iter().find(|f| f.number() == 1)?;
        let value = entry.field.iter().find(|f| f.number() == 2)?;
        Some((key, value))
    }

    /// The Type column: a scalar's proto name, a link to a message or
    /// enum, or `map<K, V>`.
    fn field_type(&self, field: &FieldDescriptorProto) -> String {
        if let Some((key, value)) = self.map_entry(field) {
            let key = scalar_name(key.r#type());
            return match value.r#type() {
                Type::Message | Type::Enum | Type::Group => {
                    format!("map&lt;`{key}`, {}&gt;", self.link(value.type_name()))
                }
                scalar => format!("`map<{key}, {}>`", scalar_name(scalar)),
            };
        }
        match field.r#type() {
            Type::Message | Type::Enum | Type::Group => self.link(field.type_name()),
            scalar => format!("`{}`", scalar_name(scalar)),
        }
    }
}

/// The `.proto` spelling of a scalar type.
fn scalar_name(t: Type) -> &'static str {
    match t {
        Type::Double => "double",
        Type::Float => "float",
        Type::Int64 => "int64",
        Type::Uint64 => "uint64",
        Type::Int32 => "int32",
        Type::Fixed64 => "fixed64",
        Type::Fixed32 => "fixed32",
        Type::Bool => "bool",
        Type::String => "string",
        Type::Bytes => "bytes",
        Type::Uint32 => "uint32",
        Type::Sfixed32 => "sfixed32",
        Type::Sfixed64 => "sfixed64",
        Type::Sint32 => "sint32",
        Type::Sint64 => "sint64",
        Type::Group => "group",
        Type::Message => "message",
        Type::Enum => "enum",
    }
}

fn link(text: &str, anchor: &str) -> String {
    format!("[`{text}`](#{anchor})")
}

/// GitHub's anchor for a heading: lowercase, letters, digits, `-` and `_`
/// kept, spaces turned into `-`, everything else dropped.
pub fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Text of a Markdown table cell: lines joined by spaces, paragraphs by
/// `<br><br>`, `|` escaped.
fn cell(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br><br>")
        .replace('|', "\\|")
}

/// The comments of one file by location path.
struct Comments {
    by_path: HashMap<Vec<i32>, String>,
}

impl Comments {
    fn new(file: &FileDescriptorProto) -> Self {
        let mut by_path = HashMap::new();
        for loc in file
            .source_code_info
            .iter()
            .flat_map(|info| info.location.iter())
        {
            let mut parts = Vec::new();
            if let Some(c) = loc
                .leading_comments
                .as_deref()
                .map(clean)
                .filter(|c| !c.is_empty())
            {
                parts.push(c);
            }
            if let Some(c) = loc
                .trailing_comments
                .as_deref()
                .map(clean)
                .filter(|c| !c.is_empty())
            {
                parts.push(c);
            }
            if !parts.is_empty() {
                // Several locations can share a path; the first is the
                // element's own declaration.
                by_path
                    .entry(loc.path.clone())
                    .or_insert(parts.join("\n\n"));
            }
        }
        Comments { by_path }
    }

    fn get(&self, path: &[i32]) -> Option<String> {
        self.by_path.get(path).cloned()
    }
}

/// A comment as written after `//` (or inside `/* */`): one leading space
/// of each line dropped, trailing spaces and surrounding blank lines
/// removed; indentation beyond the first space (list continuations) kept.
fn clean(raw: &str) -> String {
    let lines: Vec<&str> = raw
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect();
    lines.join("\n").trim_matches('\n').to_string()
}

/// The document being written, with the anchors used so far.
#[derive(Default)]
struct Doc {
    out: String,
    anchors: HashSet<String>,
}

impl Doc {
    fn heading(&mut self, level: usize, text: &str) -> Result<(), ApiDocError> {
        let anchor = slug(text);
        if !self.anchors.insert(anchor.clone()) {
            return Err(ApiDocError(format!(
                "two headings have the anchor #{anchor} (the second is {text:?}); rename one"
            )));
        }
        let _ = writeln!(self.out, "{} {text}\n", "#".repeat(level));
        Ok(())
    }

    fn line(&mut self, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn blank(&mut self) {
        self.out.push('\n');
    }

    fn paragraph(&mut self, text: &str) {
        self.line(text);
        self.blank();
    }

    /// The document with exactly one newline at its end.
    fn finish(mut self) -> String {
        while self.out.ends_with("\n\n") {
            self.out.pop();
        }
        self.out
    }
}
