//! Declarative workloads: a TOML file of transactions (SQL with `:name` parameters), parameter
//! generators, weights and think time, run by `slipstream bench FILE.toml`.
//!
//! ```toml
//! name = "key-value"
//! think = "0ms..2ms"
//! setup = """
//! CREATE TABLE IF NOT EXISTS kv (k int PRIMARY KEY, v text);
//! INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, 10000) g ON CONFLICT DO NOTHING;
//! """
//!
//! [params]
//! key = { dist = "zipfian", min = 1, max = 10000, exponent = 1.1 }
//! text = { dist = "string", min_len = 5, max_len = 30 }
//!
//! [[transaction]]
//! name = "read"
//! weight = 80
//! sql = "SELECT v FROM kv WHERE k = :key"
//!
//! [[transaction]]
//! name = "write"
//! weight = 20
//! statements = ["UPDATE kv SET v = :text WHERE k = :key", "SELECT v FROM kv WHERE k = :key"]
//! ```
//!
//! A parameter is drawn once per transaction, so `:key` is the same value in every statement of
//! one execution (pgbench's `\set`). A transaction of several statements runs inside
//! BEGIN/COMMIT unless `atomic = false`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use postgres_types::{Format, IsNull, ToSql, Type, to_sql_checked};
use serde::Deserialize;
use toml::Spanned;

use crate::generators::{Generator, ParamSpec};
use crate::phases::Stage;
use crate::think::ThinkTime;
use crate::transaction::{Session, StatementCounts, Transaction, TxError};
use crate::workload::Workload;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    /// Spanned: an error about the name names its line, as every other error does.
    name: Spanned<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    setup: Option<String>,
    #[serde(default)]
    think: Option<Spanned<String>>,
    #[serde(default)]
    intra_think: Option<Spanned<String>>,
    #[serde(default)]
    ramp_up: Option<Spanned<String>>,
    #[serde(default)]
    stages: Vec<Spanned<String>>,
    #[serde(default)]
    params: BTreeMap<String, Spanned<ParamSpec>>,
    #[serde(default)]
    transaction: Vec<Spanned<TxSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxSpec {
    name: String,
    #[serde(default = "default_weight")]
    weight: u32,
    #[serde(default)]
    sql: Option<Spanned<String>>,
    #[serde(default)]
    statements: Vec<Spanned<String>>,
    #[serde(default)]
    atomic: Option<bool>,
}

/// The most parameters one statement can have: the protocol's Bind message counts them in a
/// 16-bit field, and the server refuses more. A statement past it could never run.
const MAX_STATEMENT_PARAMETERS: usize = u16::MAX as usize;

fn default_weight() -> u32 {
    1
}

/// A workload read from a file, with the file's optional setup SQL and think times.
///
/// ```
/// let file = slipstream_bench::workload_file::parse(r#"
/// name = "key-value"
/// think = "1ms..5ms"
/// [params]
/// key = { dist = "uniform", min = 1, max = 1000 }
/// [[transaction]]
/// name = "read"
/// sql = "SELECT v FROM kv WHERE k = :key"
/// "#, "kv.toml")?;
/// assert_eq!(file.workload.name(), "key-value");
/// assert_eq!(file.think, Some("1ms..5ms".parse()?));
/// assert_eq!((file.setup, file.sha256.len()), (None, 64));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct WorkloadFile {
    /// The transactions and weights.
    pub workload: Workload,
    /// One line on what it is, if the file says.
    pub description: Option<String>,
    /// SQL run by `slipstream bench FILE --setup` (several statements allowed).
    pub setup: Option<String>,
    /// Think time between transactions, if the file sets one.
    pub think: Option<ThinkTime>,
    /// Think time inside transactions, if the file sets one.
    pub intra_think: Option<ThinkTime>,
    /// The ramp-up (`ramp_up = "10s"`), if the file sets one.
    pub ramp_up: Option<std::time::Duration>,
    /// The stages (`stages = ["30s:8", "30s:16"]`, the `--stage` syntax), if the file sets them.
    pub stages: Vec<Stage>,
    /// SHA-256 of the text parsed, in hex: saved in a run's context, so a result names the
    /// exact file that ran (and `report --merge` refuses parts of two versions of it). Taken
    /// from the bytes parsed, not read again, so an edit between the two cannot mislabel a run.
    pub sha256: String,
}

/// Reads and checks a workload file. Every error names the file and line.
///
/// ```no_run
/// let file = slipstream_bench::workload_file::load("kv.toml".as_ref())?;
/// println!("{:?}", file.workload.weights());
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn load(path: &Path) -> anyhow::Result<WorkloadFile> {
    use crate::text_file::{NotText, read_text};
    let text = read_text(path, Some(WORKLOAD_FILE_LIMIT)).map_err(|e| {
        let path = path.display();
        match e {
            NotText::Io(e) => anyhow::anyhow!("could not read workload file {path}: {e}"),
            NotText::Byte { offset, line, byte, control: true } => anyhow::anyhow!(
                "{path}:{line}: a control character (byte {byte:#04x} at byte {offset}), which TOML does not allow; a workload file is UTF-8 text: is this the file you meant?"
            ),
            NotText::Byte { offset, line, byte, control: false } => anyhow::anyhow!(
                "{path}:{line}: byte {byte:#04x} at byte {offset} is not UTF-8; a workload file is UTF-8 text: save it as UTF-8"
            ),
            NotText::TooLong { limit } => anyhow::anyhow!(
                "{path} is longer than {} MiB, which no workload file is (a TOML file of transactions): is this the file you meant?",
                limit >> 20
            ),
        }
    })?;
    parse(&text, &path.display().to_string()).map_err(anyhow::Error::msg)
}

/// The longest workload file read (16 MiB): one is a few kilobytes of TOML written by hand, so
/// anything near this is another file given by mistake, and reading on would only fill memory.
const WORKLOAD_FILE_LIMIT: usize = 16 << 20;

/// Parses workload-file text; `origin` names it in errors (`origin:line: what`).
///
/// ```
/// use slipstream_bench::workload_file::parse;
/// let file = parse("name = \"w\"\n[[transaction]]\nname = \"ping\"\nsql = \"SELECT 1\"\n", "w.toml")?;
/// assert_eq!(file.workload.weights(), [("ping".to_string(), 1)]); // weight 1 unless given
/// // Errors name the origin and the line.
/// let err = parse("name = \"w\"\n[[transaction]]\nname = 7\n", "w.toml").unwrap_err();
/// assert!(err.starts_with("w.toml:3:"), "{err}");
/// # Ok::<(), String>(())
/// ```
pub fn parse(text: &str, origin: &str) -> Result<WorkloadFile, String> {
    let at = |span: Range<usize>, what: String| {
        format!("{origin}:{}: {what}", line_of(text, span.start))
    };
    let spec: FileSpec = toml::from_str(text).map_err(|e| match e.span() {
        Some(span) => at(span, e.message().to_string()),
        None => format!("{origin}: {}", e.message()),
    })?;

    let mut names = Vec::new();
    let mut gens = Vec::new();
    for (name, p) in &spec.params {
        let g = Generator::new(p.get_ref())
            .map_err(|e| at(p.span(), format!("parameter `{name}`: {e}")))?;
        names.push(name.clone());
        gens.push(g);
    }
    let gens = Arc::new(gens);
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let think = |t: &Option<Spanned<String>>, what: &str| -> Result<Option<ThinkTime>, String> {
        t.as_ref()
            .map(|t| {
                t.get_ref()
                    .parse()
                    .map_err(|e| at(t.span(), format!("{what}: {e}")))
            })
            .transpose()
    };
    let think_time = think(&spec.think, "think")?;
    let intra_think = think(&spec.intra_think, "intra_think")?;
    let ramp_up = spec
        .ramp_up
        .as_ref()
        .map(|r| {
            crate::think::parse_duration(r.get_ref())
                .map_err(|e| at(r.span(), format!("ramp_up: {e}")))
        })
        .transpose()?;
    let stages = spec
        .stages
        .iter()
        .map(|st| {
            st.get_ref()
                .parse::<Stage>()
                .map_err(|e| at(st.span(), format!("stages: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    if spec.transaction.is_empty() {
        return Err(format!(
            "{origin}: no transactions; add at least one [[transaction]] with a name and sql"
        ));
    }
    if let Some(why) = unprintable(spec.name.get_ref()) {
        return Err(at(
            spec.name.span(),
            format!("the workload's name {:?} {why}", spec.name.get_ref()),
        ));
    }
    // The name is how a run's context and `--reporting` know Order Entry (its scale is read
    // from soe.meta, its reporting queries weighted): a file by that name would be taken for it.
    if spec.name.get_ref() == crate::order_entry::NAME {
        return Err(at(
            spec.name.span(),
            format!(
                "the workload's name \"{}\" is the built-in Order Entry's; choose another",
                crate::order_entry::NAME
            ),
        ));
    }
    let mut workload = Workload::new(spec.name.get_ref().clone());
    let mut seen = BTreeMap::new();
    for t in &spec.transaction {
        let tx = t.get_ref();
        if seen.insert(tx.name.clone(), ()).is_some() {
            return Err(at(
                t.span(),
                format!("transaction `{}` is defined twice", tx.name),
            ));
        }
        if let Some(why) = unprintable(&tx.name) {
            return Err(at(
                t.span(),
                format!("transaction name {:?} {why}", tx.name),
            ));
        }
        if tx.name == "all" {
            return Err(at(
                t.span(),
                "transaction name \"all\" is the report's row of all types; choose another".into(),
            ));
        }
        let mut sources: Vec<&Spanned<String>> = tx.sql.iter().collect();
        sources.extend(tx.statements.iter());
        if let Some(empty) = sources.iter().find(|s| !has_sql(s.get_ref())) {
            return Err(at(
                empty.span(),
                format!(
                    "transaction `{}` has an empty statement, which would count as a success without running anything",
                    tx.name
                ),
            ));
        }
        if sources.is_empty() {
            return Err(at(
                t.span(),
                format!(
                    "transaction `{}` has no SQL: give `sql` or `statements`",
                    tx.name
                ),
            ));
        }
        let mut uses: Vec<usize> = Vec::new();
        // Maps, not scans: a statement of 70,000 parameters took 11.6 s to read.
        let mut slot_of: HashMap<usize, usize> = HashMap::new();
        let mut statements = Vec::new();
        let mut backslash_literal = None;
        for s in sources {
            let (sql, refs, backslash) = bind_names_noting(s.get_ref())
                .map_err(|e| at(s.span(), format!("transaction `{}` {e}", tx.name)))?;
            if refs.len() > MAX_STATEMENT_PARAMETERS {
                return Err(at(
                    s.span(),
                    format!(
                        "transaction `{}` has a statement of {} parameters; PostgreSQL takes at most {MAX_STATEMENT_PARAMETERS} in one statement (its protocol counts them in 16 bits): split it",
                        tx.name,
                        refs.len()
                    ),
                ));
            }
            let mut args = Vec::new();
            for r in refs {
                let g = index.get(r.as_str()).copied().ok_or_else(|| {
                    at(
                        s.span(),
                        format!(
                            "transaction `{}` uses `:{r}`, which is not in [params] (known: {})",
                            tx.name,
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    )
                })?;
                let slot = *slot_of.entry(g).or_insert_with(|| {
                    uses.push(g);
                    uses.len() - 1
                });
                args.push(slot);
            }
            if backslash && backslash_literal.is_none() {
                backslash_literal = Some(format!("{origin}:{}", line_of(text, s.span().start)));
            }
            statements.push(Planned {
                kind: StatementKind::of(&sql),
                sql,
                args,
            });
        }
        let atomic = tx.atomic.unwrap_or(statements.len() > 1);
        let plan = Arc::new(Plan {
            statements,
            uses,
            atomic,
            backslash_literal,
        });
        let gens = gens.clone();
        workload = workload.transaction(tx.name.clone(), tx.weight, move || FileTransaction {
            plan: plan.clone(),
            gens: gens.clone(),
            values: vec![String::new(); plan.uses.len()],
        });
    }
    // Every type is off: named at the first, where a weight would turn one on (every
    // mistake in a file names a line).
    workload.check().map_err(|e| {
        at(
            spec.transaction[0].span(),
            format!("{e}; give one a positive weight"),
        )
    })?;
    Ok(WorkloadFile {
        workload,
        description: spec.description,
        setup: spec.setup,
        think: think_time,
        intra_think,
        ramp_up,
        stages,
        sha256: crate::context::sha256_hex(text.as_bytes()),
    })
}

/// Why `name` cannot name a workload or a transaction, if it cannot. A name goes into tables,
/// CSV lines, file names and the terminal: a blank one reads as nothing, and a control or
/// invisible formatting character (a newline, an escape sequence, a zero-width space, a
/// right-to-left override) would break or forge what it is printed in.
fn unprintable(name: &str) -> Option<&'static str> {
    let invisible = |c: char| {
        c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}')
    };
    if name.trim().is_empty() {
        Some("is blank; use printable text")
    } else if name.chars().any(invisible) {
        Some("holds a control or invisible character; use printable text")
    } else {
        None
    }
}

/// Whether `sql` holds anything but whitespace, semicolons and comments: a statement that
/// runs nothing would count as a success.
fn has_sql(sql: &str) -> bool {
    let chars: Vec<char> = sql.chars().collect();
    skip_blank(&chars, 0, |c| c == ';') < chars.len()
}

/// The index of the first character at or after `i` that is not whitespace, a comment, or
/// one of `also`.
fn skip_blank(chars: &[char], mut i: usize, also: impl Fn(char) -> bool) -> usize {
    while i < chars.len() {
        if chars[i].is_whitespace() || also(chars[i]) {
            i += 1;
        } else if let Some(end) = comment_end(chars, i) {
            i = end;
        } else {
            break;
        }
    }
    i
}

/// Where the comment that starts at `i` ends (the index after it), if one starts there: a
/// `--` comment runs to the end of its line, and `/* */` comments nest, as in PostgreSQL. An
/// unclosed one runs to the end.
fn comment_end(chars: &[char], i: usize) -> Option<usize> {
    match (chars.get(i), chars.get(i + 1)) {
        (Some('-'), Some('-')) => Some(
            chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |n| i + n),
        ),
        (Some('/'), Some('*')) => {
            let (mut j, mut depth) = (i, 0usize);
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        return Some(j);
                    }
                } else {
                    j += 1;
                }
            }
            Some(chars.len())
        }
        _ => None,
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// [`bind_names_noting`] without the note, for the tests.
#[cfg(test)]
fn bind_names(sql: &str) -> Result<(String, Vec<String>), String> {
    bind_names_noting(sql).map(|(out, names, _)| (out, names))
}

/// Replaces `:name` with `$1`, `$2`, ... (one number per distinct name) and returns the names
/// in number order. Skips what PostgreSQL does not read as SQL text: `::` casts, quoted
/// literals and identifiers (`E'...'` with its backslash escapes too), dollar-quoted strings,
/// and `--` and (nested) `/* */` comments. A positional `$1` of the file's own is an error.
///
/// Also says whether a `'...'` literal (not `E'...'`) holds a backslash: the one place where
/// this reading, PostgreSQL's under `standard_conforming_strings = on`, differs from a
/// server's under `off` (the backslash escapes the quote, and the literal ends elsewhere).
fn bind_names_noting(sql: &str) -> Result<(String, Vec<String>, bool), String> {
    let mut backslash_literal = false;
    let mut out = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut numbers: HashMap<String, usize> = HashMap::new();
    let chars: Vec<char> = sql.chars().collect();
    let ident = ident_char;
    let atomic_body = begins_atomic(sql);
    let mut i = 0;
    while i < chars.len() {
        if let Some(end) = comment_end(&chars, i) {
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        let c = chars[i];
        match c {
            // An escape string: a backslash takes the next character, a quote too.
            '\'' if i > 0
                && matches!(chars[i - 1], 'E' | 'e')
                && (i < 2 || !ident(chars[i - 2])) =>
            {
                out.push(c);
                i += 1;
                while i < chars.len() {
                    out.push(chars[i]);
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        out.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if chars[i - 1] == '\'' {
                        break;
                    }
                }
            }
            '$' if (i == 0 || !ident(chars[i - 1])) && dollar_tag(&chars[i..]).is_some() => {
                // `$tag$ ... $tag$`: copied whole, up to the same tag.
                let tag = dollar_tag(&chars[i..]).unwrap_or_default();
                out.extend(&chars[i..i + tag.len()]);
                i += tag.len();
                while i < chars.len() && !chars[i..].starts_with(&tag) {
                    out.push(chars[i]);
                    i += 1;
                }
                let close = tag.len().min(chars.len() - i);
                out.extend(&chars[i..i + close]);
                i += close;
            }
            '\'' | '"' => {
                // Copy through the closing quote (a doubled quote stays inside).
                out.push(c);
                i += 1;
                while i < chars.len() {
                    out.push(chars[i]);
                    if chars[i] == c {
                        break;
                    }
                    backslash_literal |= c == '\'' && chars[i] == '\\';
                    i += 1;
                }
                i += 1;
            }
            // A positional parameter of one's own would take a number `:name` gets too.
            '$' if (i == 0 || !(ident(chars[i - 1]) || chars[i - 1] == '$'))
                && chars.get(i + 1).is_some_and(char::is_ascii_digit) =>
            {
                let digits: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                return Err(format!(
                    "uses `${digits}`: parameters are named, `:name` for a generator in [params], and their numbers are given by the file"
                ));
            }
            ':' if chars.get(i + 1) == Some(&':') => {
                out.push_str("::");
                i += 2;
            }
            ':' if chars
                .get(i + 1)
                .is_some_and(|n| n.is_alphabetic() || *n == '_') =>
            {
                // Letters as PostgreSQL's identifiers take them, non-ASCII too: `:kéy` is one
                // name, not `:k` and then `éy`.
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && ident(chars[end]) {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                let n = *numbers.entry(name).or_insert_with_key(|name| {
                    names.push(name.clone());
                    names.len()
                });
                out.push_str(&format!("${n}"));
                i = end;
            }
            // A second command after a `;`: the extended protocol takes one, so every
            // transaction would fail (42601, cannot insert multiple commands into a prepared
            // statement). A `BEGIN ATOMIC` function body holds `;`s inside its one command.
            // (Once per entry: the first `;` outside a function body ends the scan either way.)
            ';' if !atomic_body => {
                if has_sql(&chars[i + 1..].iter().collect::<String>()) {
                    return Err(
                        "holds more than one statement in one entry (a `;` with SQL after it); PostgreSQL prepares one at a time: give each its own entry in `statements`"
                            .to_string(),
                    );
                }
                out.extend(&chars[i..]);
                i = chars.len();
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok((out, names, backslash_literal))
}

/// Whether `sql` holds a SQL-standard function body (`BEGIN ATOMIC ... END`), whose
/// statements end in `;` inside one command.
fn begins_atomic(sql: &str) -> bool {
    let words: Vec<String> = sql
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    words
        .windows(2)
        .any(|w| w[0] == "begin" && w[1] == "atomic")
}

/// Whether PostgreSQL's lexer takes `c` into an identifier or a dollar-quote tag after its
/// first character: ASCII letters and digits, `_`, and any non-ASCII character (the lexer
/// takes every byte from 0x80 up, so `€`, `·` and combining marks too, which
/// `char::is_alphanumeric` would not).
fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()
}

/// The opening `$tag$` (or `$$`) of a dollar-quoted string at the start of `chars`.
fn dollar_tag(chars: &[char]) -> Option<Vec<char>> {
    let end = chars[1..].iter().position(|&c| c == '$')? + 1;
    let tag = &chars[1..end];
    let valid = tag.is_empty() || (!tag[0].is_ascii_digit() && tag.iter().all(|&c| ident_char(c)));
    valid.then(|| chars[..=end].to_vec())
}

#[derive(Debug, Clone, Copy)]
enum StatementKind {
    Select,
    Insert,
    Update,
    Delete,
    Commit,
    Rollback,
    Other,
}

impl StatementKind {
    /// By the first word, after comments and opening parentheses (`(SELECT 1)`).
    fn of(sql: &str) -> StatementKind {
        let chars: Vec<char> = sql.chars().collect();
        let word: String = chars[skip_blank(&chars, 0, |c| c == '(')..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect::<String>()
            .to_ascii_lowercase();
        match word.as_str() {
            "select" | "with" | "values" | "table" | "show" => StatementKind::Select,
            "insert" => StatementKind::Insert,
            "update" => StatementKind::Update,
            "delete" => StatementKind::Delete,
            "commit" | "end" => StatementKind::Commit,
            "rollback" | "abort" => StatementKind::Rollback,
            _ => StatementKind::Other,
        }
    }

    fn count(self, c: &mut StatementCounts) {
        match self {
            StatementKind::Select => c.selects += 1,
            StatementKind::Insert => c.inserts += 1,
            StatementKind::Update => c.updates += 1,
            StatementKind::Delete => c.deletes += 1,
            StatementKind::Commit => c.commits += 1,
            StatementKind::Rollback => c.rollbacks += 1,
            StatementKind::Other => {}
        }
    }
}

#[derive(Debug)]
struct Planned {
    sql: String,
    /// For each `$n`, its index into the transaction's drawn values.
    args: Vec<usize>,
    kind: StatementKind,
}

#[derive(Debug)]
struct Plan {
    statements: Vec<Planned>,
    /// The generators the transaction draws from, once each per execution.
    uses: Vec<usize>,
    atomic: bool,
    /// Where (`file:line`) a statement has a `'...'` literal holding a backslash, which a
    /// session with `standard_conforming_strings = off` reads otherwise.
    backslash_literal: Option<String>,
}

struct FileTransaction {
    plan: Arc<Plan>,
    gens: Arc<Vec<Generator>>,
    values: Vec<String>,
}

/// A parameter sent in text format: the server parses it as whatever type it inferred.
#[derive(Debug)]
struct Text<'a>(&'a str);

impl ToSql for Text<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

impl Transaction for FileTransaction {
    /// Refuses a session that would read the file's literals otherwise than the file was
    /// read: with `standard_conforming_strings = off` a backslash in `'...'` escapes the
    /// quote, the literal ends elsewhere, and a `$n` put for a `:name` lands inside it or a
    /// literal's text outside; every transaction failed with 42601 about SQL the file never
    /// had (`tests/attack_session_settings.rs`).
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        if let Some(at) = &self.plan.backslash_literal
            && let Ok(c) = s.client()
            && c.parameter("standard_conforming_strings") == Some("off")
        {
            return Err(TxError::new(
                "client:standard-conforming-strings",
                format!(
                    "{at} has a backslash in a '...' literal, read as PostgreSQL reads it with standard_conforming_strings = on (its default), but this session has it off (set by the database, the role or the connection string), so the server would read the literal otherwise; give the bench's connections options=-c standard_conforming_strings=on, or write the literal as E'...' with its backslashes doubled"
                ),
            ));
        }
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        for (value, &g) in self.values.iter_mut().zip(&self.plan.uses) {
            value.clear();
            self.gens[g]
                .draw(s.rng(), value)
                .map_err(|why| TxError::new("client:parameter", why))?;
        }
        let mut counts = StatementCounts::default();
        let result = run_plan(&self.plan, &self.values, s, &mut counts).await;
        s.count().add(&counts);
        result
    }
}

async fn run_plan(
    plan: &Plan,
    values: &[String],
    s: &mut Session,
    counts: &mut StatementCounts,
) -> Result<(), TxError> {
    if plan.atomic {
        s.client()?.simple_query("BEGIN").await?;
    }
    for (i, st) in plan.statements.iter().enumerate() {
        // The intra-transaction think time, between steps (not counted in the latency).
        if i > 0 {
            s.think().await;
        }
        let client = s.client()?;
        let texts: Vec<Text<'_>> = st.args.iter().map(|&i| Text(&values[i])).collect();
        let params: Vec<&(dyn ToSql + Sync)> = texts.iter().map(|t| t as _).collect();
        // The rows are not used: `execute` reads them off the wire without building them.
        client.execute(st.sql.as_str(), &params).await?;
        st.kind.count(counts);
    }
    if plan.atomic {
        if let Err(e) = s.client()?.simple_query("COMMIT").await {
            // A COMMIT the server refuses (a deferred constraint, a serialization failure)
            // ends the block with a rollback, so the runner sends none: counted here, as
            // the runner counts its own. Without the server's word (a broken connection) the
            // outcome is unknown, and nothing is counted.
            if e.code().is_some() {
                counts.rollbacks += 1;
            }
            return Err(e.into());
        }
        counts.commits += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "kv"
think = "1ms..2ms"

[params]
key = { dist = "uniform", min = 1, max = 100 }
word = { dist = "string", min_len = 1, max_len = 3 }

[[transaction]]
name = "read"
weight = 3
sql = "SELECT :key::int, ':not' -- :nor\n"

[[transaction]]
name = "write"
statements = ["UPDATE kv SET v = :word WHERE k = :key", "SELECT :key"]
"#;

    /// Only a backslash in a plain `'...'` literal reads otherwise under
    /// `standard_conforming_strings = off`: not in `E'...'`, dollar quotes, identifiers or
    /// comments.
    #[test]
    fn a_backslash_is_noted_in_plain_literals_only() {
        for (sql, noted) in [
            ("SELECT 'C:\\', :k", true),
            ("SELECT 'a''\\b'", true),
            ("SELECT E'\\n', :k", false),
            ("SELECT $$\\$$, \"a\\b\", :k -- \\ \n", false),
            ("SELECT /* \\ */ 'plain', :k", false),
        ] {
            assert_eq!(bind_names_noting(sql).unwrap().2, noted, "{sql}");
        }
    }

    #[test]
    fn a_good_file_parses() {
        let f = parse(GOOD, "kv.toml").unwrap();
        assert_eq!(
            f.workload.weights(),
            vec![("read".to_string(), 3), ("write".to_string(), 1)]
        );
        assert_eq!(f.think, Some("1ms..2ms".parse().unwrap()));
        // The hash is of the text parsed, as `sha256sum kv.toml` gives it.
        assert_eq!(f.sha256, crate::context::sha256_hex(GOOD.as_bytes()));
        assert_ne!(
            f.sha256,
            parse(&GOOD.replace("100", "101"), "kv.toml")
                .unwrap()
                .sha256
        );
    }

    #[test]
    fn names_become_numbered_parameters() {
        let (sql, names) = bind_names(
            "SELECT :key::int, ':not', \"x:y\" -- :nor\nFROM t WHERE a = :b AND c = :key",
        )
        .unwrap();
        assert_eq!(
            sql,
            "SELECT $1::int, ':not', \"x:y\" -- :nor\nFROM t WHERE a = $2 AND c = $1"
        );
        assert_eq!(names, ["key", "b"]);
    }

    fn error(text: &str) -> String {
        match parse(text, "w.toml") {
            Ok(_) => panic!("parsed: {text}"),
            Err(e) => e,
        }
    }

    /// What PostgreSQL does not read as SQL text keeps its colons (found by session 33's
    /// attacker: each of these was bound as a parameter, and every run failed with 42P18, or a
    /// file was refused for a name in a comment).
    #[test]
    fn comments_dollar_quotes_and_escape_strings_keep_their_colons() {
        for sql in [
            "SELECT /* :k */ 1",
            "SELECT /* a /* nested :k */ still :k */ 1",
            "SELECT $$:k$$",
            "SELECT $tag$ :k $ $$ :k $tag$",
            "SELECT E'\\':k'",
            "SELECT 1 /* see :note */",
        ] {
            let (out, names) = bind_names(sql).unwrap();
            assert_eq!((out.as_str(), names.len()), (sql, 0), "{sql}");
        }
        let (out, names) = bind_names("SELECT $x$:a$x$, :b, e'\\'' || :c").unwrap();
        assert_eq!(out, "SELECT $x$:a$x$, $1, e'\\'' || $2");
        assert_eq!(names, ["b", "c"]);
        // A non-ASCII name is one name.
        let (out, names) = bind_names("SELECT :kéy").unwrap();
        assert_eq!(
            (out.as_str(), names),
            ("SELECT $1", vec!["kéy".to_string()])
        );
    }

    /// A positional `$1` of the file's own is refused: `:name` numbers its parameters from
    /// `$1`, so the two collided, and a `$1` alone had nothing bound to it (every run failed
    /// with 08P01). Dollar quotes, quoted text, comments and identifiers with a `$` are not
    /// parameters. Before, `bind_names` passed each of the first three through. Non-ASCII
    /// characters are identifier and tag characters, as in PostgreSQL's lexer (session 34's
    /// attacker: `$€$ $1 $€$` and `x€$1` were refused; each runs in psql).
    #[test]
    fn a_positional_parameter_is_refused_where_postgresql_would_read_one() {
        for sql in [
            "SELECT $1",
            "SELECT :a, $1",
            "SELECT 1 WHERE x=$12",
            "SELECT ($1)",
        ] {
            let e = bind_names(sql).unwrap_err();
            assert!(e.contains("uses `$") && e.contains(":name"), "{sql}: {e}");
        }
        for sql in [
            "SELECT '$1', \"a$1\", a$1, $$ $1 $$ -- $1",
            "SELECT /* $1 */ $q$ $2 $q$",
            "SELECT $€$ costs $1 $€$ AS price",
            "SELECT $😀$ $1 $😀$",
            "SELECT $x·y$ $1 $x·y$",
            "SELECT 1 AS x€$1",
            "SELECT 1 AS cafe\u{301}$1",
        ] {
            assert!(bind_names(sql).is_ok(), "{sql}");
        }
        let e = error("name = \"x\"\n[[transaction]]\nname = \"t\"\nsql = \"SELECT $1\"\n");
        assert!(
            e.contains("w.toml:4") && e.contains("transaction `t` uses `$1`"),
            "{e}"
        );
    }

    /// A statement is counted by its first word after comments and parentheses. Before,
    /// `-- c\nUPDATE` and `(SELECT 1)` counted as neither.
    #[test]
    fn a_statements_kind_is_read_past_comments_and_parentheses() {
        for (sql, want) in [
            ("-- note\nUPDATE t SET a = 1", "Update"),
            ("/* a /* b */ */ delete from t", "Delete"),
            ("((SELECT 1))", "Select"),
            ("  insert into t values (1)", "Insert"),
            ("VACUUM", "Other"),
        ] {
            assert_eq!(format!("{:?}", StatementKind::of(sql)), want, "{sql}");
        }
    }

    /// Names that would break a table, a CSV line or a terminal, and statements that run
    /// nothing, are refused when the file is read (session 33's attacker: an empty `sql`
    /// counted 800 successes a second).
    #[test]
    fn blank_or_control_names_and_empty_statements_are_refused() {
        for name in ["", " ", "line1\\nline2", "esc\\u001b[2J"] {
            let e = error(&format!(
                "name = \"x\"\n[[transaction]]\nname = \"{name}\"\nsql = \"SELECT 1\"\n"
            ));
            assert!(
                e.contains("blank") || e.contains("control"),
                "{name:?}: {e}"
            );
        }
        // Invisible or look-alike names (this session's second attacker).
        for name in ["all\\u200b", "x\\u2028y", "x\\u202eevil"] {
            let e = error(&format!(
                "name = \"x\"\n[[transaction]]\nname = \"{name}\"\nsql = \"SELECT 1\"\n"
            ));
            assert!(e.contains("invisible"), "{name:?}: {e}");
        }
        let e = error("name = \"x\"\n[[transaction]]\nname = \"all\"\nsql = \"SELECT 1\"\n");
        assert!(e.contains("row of all types"), "{e}");
        let e =
            error("name = \"evil\\nline\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\n");
        assert!(e.contains("workload's name"), "{e}");
        // Its line too, as every other error gives (session 43, helper 47: before, only
        // `w.toml: the workload's name ...`).
        let e = error(
            "# a workload\n\nname = \" \"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\n",
        );
        assert!(e.starts_with("w.toml:3: the workload's name"), "{e}");
        // Order Entry's name: the context would read soe.meta for the file's run and
        // `--reporting` would take the file for Order Entry (session 44).
        let e =
            error("name = \"order-entry\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\n");
        assert!(
            e.starts_with("w.toml:1: the workload's name \"order-entry\" is the built-in"),
            "{e}"
        );
        for sql in [
            "",
            "   ",
            ";",
            " ; ",
            "; ; ;",
            "-- nothing at all",
            "/* :x */",
            "/* a /* b */ */ ;",
        ] {
            let e = error(&format!(
                "name = \"x\"\n[[transaction]]\nname = \"a\"\nsql = \"{sql}\"\n"
            ));
            assert!(e.contains("empty statement"), "{sql:?}: {e}");
        }
    }

    /// Two commands in one entry (`SELECT 1; SELECT 2`) were read as fine, and every
    /// transaction failed with 42601 (cannot insert multiple commands into a prepared
    /// statement); refused when read now, naming the line. A trailing `;`, one followed by a
    /// comment, and `;`s in quotes (escape strings with `\'` and `\\` too), comments, dollar
    /// quotes or a `BEGIN ATOMIC` body are not a second command.
    #[test]
    fn two_commands_in_one_entry_are_refused() {
        let file = |sql: &str| {
            format!("name = \"x\"\n\n[[transaction]]\nname = \"a\"\nsql = '''{sql}'''\n")
        };
        for two in [
            "SELECT 1; SELECT 2",
            "SELECT 1;\nUPDATE t SET a = 1;",
            "SELECT ';'; SELECT 2",
            "SELECT E'\\\\'; SELECT 2",
        ] {
            let e = error(&file(two));
            assert!(
                e.starts_with("w.toml:5:") && e.contains("more than one statement"),
                "{two:?}: {e}"
            );
        }
        for one in [
            "SELECT 1;",
            "SELECT 1;;",
            "SELECT 1; -- done",
            "SELECT 1; /* done */",
            "SELECT ';', $$;$$, \"a;b\" -- ;x\n",
            "SELECT E'it\\'s; ok', e'\\\\', 'a'';b'",
            "SELECT U&'d;a', X'1F', B'01', $q$ $$; $q$",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT 2; END",
        ] {
            assert!(parse(&file(one), "w.toml").is_ok(), "{one:?}");
        }
    }

    /// A statement of more parameters than the protocol can bind was read as fine, though
    /// none of its transactions could run; it is refused when read, naming its line.
    #[test]
    fn a_statement_of_more_parameters_than_postgresql_takes_is_refused() {
        let file = |n: usize| {
            let params: String = (0..n)
                .map(|i| format!("p{i} = {{ dist = \"uniform\", min = 1, max = 2 }}\n"))
                .collect();
            let refs: Vec<String> = (0..n).map(|i| format!(":p{i}")).collect();
            format!(
                "name = \"x\"\n[params]\n{params}[[transaction]]\nname = \"a\"\nsql = \"SELECT {}\"\n",
                refs.join(",")
            )
        };
        assert!(parse(&file(65_535), "w.toml").is_ok());
        let e = error(&file(65_536));
        assert!(
            e.starts_with(&format!("w.toml:{}:", 65_536 + 5)) && e.contains("at most 65535"),
            "{}",
            &e[..e.len().min(300)]
        );
    }

    /// A file whose every transaction has weight 0 was refused naming the file alone.
    #[test]
    fn a_file_of_types_all_off_names_a_line() {
        let e = error(
            "name = \"x\"\n\n[[transaction]]\nname = \"a\"\nweight = 0\nsql = \"SELECT 1\"\n[[transaction]]\nname = \"b\"\nweight = 0\nsql = \"SELECT 1\"\n",
        );
        assert!(
            e.starts_with("w.toml:3:") && e.contains("weight above 0"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e =
            error("name = \"x\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\nwieght = 2\n");
        assert!(e.starts_with("w.toml:5:") && e.contains("wieght"), "{e}");
        let e = error(
            "name = \"x\"\n[params]\nk = { dist = \"uniform\", min = 9, max = 1 }\n[[transaction]]\nname = \"a\"\nsql = \"SELECT :k\"\n",
        );
        assert!(
            e.starts_with("w.toml:3:") && e.contains("larger than max"),
            "{e}"
        );
        let e = error("name = \"x\"\n[params]\nk = { dist = \"poisson\", min = 1 }\n");
        assert!(e.starts_with("w.toml:3:") && e.contains("poisson"), "{e}");
        let e = error("name = \"x\"\n\n[[transaction]]\nname = \"a\"\nsql = \"SELECT :nope\"\n");
        assert!(e.starts_with("w.toml:5:") && e.contains(":nope"), "{e}");
        let e = error(
            "name = \"x\"\nthink = \"5 parsecs\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\n",
        );
        assert!(e.starts_with("w.toml:2:") && e.contains("unit"), "{e}");
        let e = error(
            "name = \"x\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 1\"\n[[transaction]]\nname = \"a\"\nsql = \"SELECT 2\"\n",
        );
        assert!(e.starts_with("w.toml:5:") && e.contains("twice"), "{e}");
        let e =
            error("name = \"x\"\n[[transaction]]\nname = \"a\"\nweight = 0\nsql = \"SELECT 1\"\n");
        assert!(e.contains("weight above 0"), "{e}");
        let e = error("name = \"x\"\n[[transaction]\n");
        assert!(e.starts_with("w.toml:2:"), "{e}");
        let e = error("name = \"x\"\n");
        assert!(e.contains("no transactions"), "{e}");
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::SmallRng};

    const RICH: &str = r#"name = "kv"
description = "d"
think = "1ms..2ms"
intra_think = "0ms"
ramp_up = "1s"
stages = ["2s:4", "1s:rate=5"]
setup = """
CREATE TABLE kv (k int);
"""

[params]
key = { dist = "uniform", min = 1, max = 100 }
z = { dist = "zipfian", min = 1, max = 100, exponent = 1.1 }
g = { dist = "gaussian", mean = 5.0, sd = 1.0, min = 0.5, max = 9.5, decimals = 1 }
s = { dist = "sequence", start = 9223372036854775800, step = 3 }
word = { dist = "string", min_len = 1, max_len = 3, alphabet = "ab" }
c = { dist = "choice", values = ["x", "y"] }

[[transaction]]
name = "read"
weight = 3
sql = "SELECT :key::int, ':not', $$:no$$, E'\\':no' /* :n /* */ */ -- :nor\n"

[[transaction]]
name = "write"
atomic = false
statements = ["UPDATE kv SET v = :word WHERE k = :key", "SELECT :z, :g, :s, :c"]
"#;

    /// Where an error must point: `w.toml:LINE:` with a line in the file, or `w.toml: ` for
    /// what belongs to no line.
    fn well_formed(text: &str, e: &str) -> bool {
        let lines = text.matches('\n').count() + 1;
        let Some(rest) = e.strip_prefix("w.toml:") else {
            return false;
        };
        if rest.starts_with(' ') {
            return rest.len() > 1;
        }
        let (n, what) = rest.split_once(": ").unwrap_or(("", ""));
        n.parse::<usize>().is_ok_and(|n| (1..=lines).contains(&n)) && !what.is_empty()
    }

    fn check(text: &str) {
        let got = std::panic::catch_unwind(|| parse(text, "w.toml").map(drop));
        match got {
            Err(_) => panic!("parse panicked on {text:?}"),
            Ok(Err(e)) => assert!(well_formed(text, &e), "{e:?} for {text:?}"),
            Ok(Ok(())) => {}
        }
    }

    /// Truncated at every character, and mutated at random (characters that matter to TOML,
    /// SQL quoting and the parameter scanner inserted, deleted, lines duplicated and swapped):
    /// read or refused naming the file and a line in it, never a panic.
    #[test]
    fn truncated_and_mutated_files_are_read_or_refused_never_a_panic() {
        for (i, _) in RICH.char_indices() {
            check(&RICH[..i]);
        }
        const SPICE: &[&str] = &[
            "\"",
            "'",
            "$",
            "$$",
            ":",
            "::",
            "\n",
            "[",
            "]",
            "{",
            "}",
            "=",
            "/*",
            "*/",
            "--",
            "E'",
            "\\",
            "0",
            "-1",
            "1e999",
            "nan",
            "é",
            "\u{0}",
            "\u{202e}",
            "$1",
            ":x",
            ",",
            "18446744073709551616",
            "[[transaction]]\n",
            "name = \"\"\n",
        ];
        let mut rng = SmallRng::seed_from_u64(61);
        for _ in 0..4000 {
            let mut text: Vec<String> = RICH.lines().map(str::to_string).collect();
            for _ in 0..rng.random_range(1..4) {
                let l = rng.random_range(0..text.len());
                match rng.random_range(0..4) {
                    0 => {
                        let line = &mut text[l];
                        let at = (0..=line.len())
                            .filter(|&i| line.is_char_boundary(i))
                            .nth(rng.random_range(0..=line.chars().count()))
                            .unwrap_or(0);
                        line.insert_str(at, SPICE[rng.random_range(0..SPICE.len())]);
                    }
                    1 => {
                        let line = &mut text[l];
                        if let Some((at, c)) = line
                            .char_indices()
                            .nth(rng.random_range(0..=line.chars().count()))
                        {
                            line.replace_range(at..at + c.len_utf8(), "");
                        }
                    }
                    2 => {
                        let dup = text[l].clone();
                        text.insert(l, dup);
                    }
                    _ => {
                        let m = rng.random_range(0..text.len());
                        text.swap(l, m);
                    }
                }
            }
            check(&text.join("\n"));
        }
    }
}

/// `:name` binding held to the server's own lexer: generated `SELECT` lists mix expressions
/// whose text holds `:name` where PostgreSQL reads no parameter (string constants of every
/// kind, dollar quotes, quoted names, nested comments) with real ones, each with a known
/// value. The rewritten statement is run on a real server with a distinct value per name,
/// and every column must come back as the generator says: a name bound inside a constant, or
/// one left unbound, changes a value or fails the statement.
#[cfg(test)]
mod against_the_server {
    use super::bind_names;
    use rand::{Rng, SeedableRng, rngs::SmallRng};

    /// The value each name is bound to.
    const VALUES: [(&str, &str); 3] = [("a", "A1"), ("b", "B2"), ("kéy", "K3")];

    /// Expressions and the text each returns; `{a}` stands for the value bound to `:a`.
    const EXPRESSIONS: &[(&str, &str)] = &[
        ("':a'", ":a"),
        ("'it''s :b'", "it's :b"),
        (r"E'\':a'", "':a"),
        (r"e'x\\' || :a", r"x\{a}"),
        (r"'y\' || :b", r"y\{b}"),
        ("$$:a$$", ":a"),
        ("$t$ :b $$ :a $t$", " :b $$ :a "),
        ("$€$:kéy$€$", ":kéy"),
        ("U&':a'", ":a"),
        (":a", "{a}"),
        (":b::text", "{b}"),
        ("(:kéy)", "{kéy}"),
        ("1::text AS \":a\"", "1"),
        ("/* :a /* :b */ */ 'c'", "c"),
        ("'x' || :a || 'y'", "x{a}y"),
        ("ARRAY[':a', :b]::text", "{:a,{b}}"),
        (r"E'\\'::text", r"\"),
        ("'a'::text AS x$1", "a"),
    ];

    /// Between expressions, after their comma.
    const SEPARATORS: &[&str] = &[" ", "\n", " /* :b */ ", " -- :a\n", "\t/* $$ :kéy */ "];

    #[tokio::test]
    async fn every_generated_statement_returns_what_its_text_says() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        let mut rng = SmallRng::seed_from_u64(33);
        for n in 0..300 {
            let (mut sql, mut want) = (String::from("SELECT "), Vec::new());
            for i in 0..rng.random_range(1..6usize) {
                if i > 0 {
                    sql.push(',');
                    sql.push_str(SEPARATORS[rng.random_range(0..SEPARATORS.len())]);
                }
                let (expr, value) = EXPRESSIONS[rng.random_range(0..EXPRESSIONS.len())];
                sql.push_str(expr);
                want.push(VALUES.iter().fold(value.to_string(), |v, (name, bound)| {
                    v.replace(&format!("{{{name}}}"), bound)
                }));
            }
            let (out, names) = bind_names(&sql).unwrap_or_else(|e| panic!("case {n}: {sql}: {e}"));
            let values: Vec<&str> = names
                .iter()
                .map(|name| VALUES.iter().find(|(n, _)| n == name).unwrap().1)
                .collect();
            let params: Vec<&(dyn postgres_types::ToSql + Sync)> = values
                .iter()
                .map(|v| v as &(dyn postgres_types::ToSql + Sync))
                .collect();
            let row = c
                .query_one(out.as_str(), &params)
                .await
                .unwrap_or_else(|e| panic!("case {n}: {sql:?} became {out:?}: {e}"));
            let got: Vec<String> = (0..want.len())
                .map(|i| row.get::<_, String>(i).unwrap())
                .collect();
            assert_eq!(got, want, "case {n}: {sql:?} became {out:?}");
        }
    }
}
