//! How a search reads the database, for both backends: the filter as predicates ([`Pred`]),
//! the SQL text and its parameters per dialect ([`Sql`]), the choice between the filter's own
//! index and a walk in time order ([`choose`]), and the statements each plan runs.
//!
//! Never: pastes user text into SQL (every value is a parameter; only our own column and index
//! names are written into the text), or reads without a bound (a count stops at
//! [`INDEX_MATCHES_MAX`], a walk at its row budget).

use crate::CdrError;
use crate::query::Cursor;

pub(crate) use crate::search::INDEX_MATCHES_MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A parameter value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// NULL of a type (PostgreSQL needs one).
    Null(Ty),
}

/// A parameter's SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    Real,
    Text,
    Blob,
}

impl Arg {
    pub fn ty(&self) -> Ty {
        match self {
            Arg::Int(_) => Ty::Int,
            Arg::Real(_) => Ty::Real,
            Arg::Text(_) => Ty::Text,
            Arg::Blob(_) => Ty::Blob,
            Arg::Null(t) => *t,
        }
    }
}

/// SQL text with its parameters, numbered in the dialect's style.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub text: String,
    pub args: Vec<Arg>,
    pub dialect: Dialect,
}

impl Sql {
    pub fn new(dialect: Dialect) -> Sql {
        Sql {
            text: String::new(),
            args: Vec::new(),
            dialect,
        }
    }

    /// Adds a parameter and returns its placeholder (`?3`, or `$3::bigint` with PostgreSQL's
    /// type, so that the server never has to guess it).
    pub fn arg(&mut self, a: Arg) -> String {
        let ty = match a.ty() {
            Ty::Int => "bigint",
            Ty::Real => "float8",
            Ty::Text => "text",
            Ty::Blob => "bytea",
        };
        self.args.push(a);
        let n = self.args.len();
        match self.dialect {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}::{ty}"),
        }
    }

    pub fn int(&mut self, v: i64) -> String {
        self.arg(Arg::Int(v))
    }

    fn pg(&self) -> bool {
        self.dialect == Dialect::Postgres
    }
}

/// A value read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A row read back, taken column by column.
pub(crate) struct Cols {
    vals: std::vec::IntoIter<Val>,
    at: usize,
}

/// A column that does not hold what the schema says (another program wrote the table).
fn bad_column(at: usize, want: &str, got: &Val) -> CdrError {
    CdrError::Data {
        problem: format!("column {at} of a row holds {got:?} where {want} was expected"),
    }
}

impl Cols {
    pub fn new(vals: Vec<Val>) -> Cols {
        Cols {
            vals: vals.into_iter(),
            at: 0,
        }
    }

    fn next(&mut self) -> Val {
        self.at += 1;
        self.vals.next().unwrap_or(Val::Null)
    }

    pub fn opt_i64(&mut self) -> Result<Option<i64>, CdrError> {
        match self.next() {
            Val::Null => Ok(None),
            Val::Int(v) => Ok(Some(v)),
            Val::Real(v) if v.fract() == 0.0 => Ok(Some(v as i64)),
            v => Err(bad_column(self.at, "an integer", &v)),
        }
    }

    /// Column `n` (from 0) as a count, the columns before it skipped.
    pub fn nth_u64(mut self, n: usize) -> Result<u64, CdrError> {
        for _ in 0..n {
            self.next();
        }
        self.u64()
    }

    pub fn i64(&mut self) -> Result<i64, CdrError> {
        Ok(self.opt_i64()?.unwrap_or(0))
    }

    pub fn opt_f64(&mut self) -> Result<Option<f64>, CdrError> {
        match self.next() {
            Val::Null => Ok(None),
            Val::Int(v) => Ok(Some(v as f64)),
            Val::Real(v) => Ok(Some(v)),
            v => Err(bad_column(self.at, "a number", &v)),
        }
    }

    pub fn opt_text(&mut self) -> Result<Option<String>, CdrError> {
        match self.next() {
            Val::Null => Ok(None),
            Val::Text(s) => Ok(Some(s)),
            Val::Int(v) => Ok(Some(v.to_string())),
            v => Err(bad_column(self.at, "text", &v)),
        }
    }

    pub fn text(&mut self) -> Result<String, CdrError> {
        Ok(self.opt_text()?.unwrap_or_default())
    }

    pub fn opt_u16(&mut self) -> Result<Option<u16>, CdrError> {
        Ok(self.opt_i64()?.map(|v| v.clamp(0, u16::MAX as i64) as u16))
    }

    pub fn opt_u32(&mut self) -> Result<Option<u32>, CdrError> {
        Ok(self.opt_i64()?.map(|v| v.clamp(0, u32::MAX as i64) as u32))
    }

    pub fn u32(&mut self) -> Result<u32, CdrError> {
        Ok(self.opt_u32()?.unwrap_or(0))
    }

    pub fn opt_u64(&mut self) -> Result<Option<u64>, CdrError> {
        Ok(self.opt_i64()?.map(|v| v.max(0) as u64))
    }

    pub fn u64(&mut self) -> Result<u64, CdrError> {
        Ok(self.opt_u64()?.unwrap_or(0))
    }
}

/// The rows a walk found: the keys that matched, newest first, and, when it stopped on its
/// row budget, the last row it read (the next page starts below it).
#[derive(Debug, Default)]
pub(crate) struct Walked {
    pub keys: Vec<Cursor>,
    pub boundary: Option<Cursor>,
}

/// What a backend runs for the search.
pub(crate) trait Exec {
    fn dialect(&self) -> Dialect;
    /// The tables are PostgreSQL's day-partitioned layout ([`crate::pg_partition`]): a call's
    /// streams are found with its start too (`call_start_us`), so that one partition is read.
    fn partitioned(&self) -> bool {
        false
    }
    /// All rows of a statement.
    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError>;
    /// Runs a walk built by [`walk_sql`]: keys of matching rows until `want` of them, or until
    /// `budget` rows were read.
    fn walk(&mut self, sql: &Sql, want: usize, budget: usize) -> Result<Walked, CdrError>;
    /// Writes the search columns of these `cdr` rows (by id), in one transaction.
    fn update_derived(&mut self, rows: &[(i64, crate::search::Derived)]) -> Result<(), CdrError>;
}

/// What a column holds, for comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Text compared byte by byte (PostgreSQL: `COLLATE "C"`, as its index is built).
    Text,
    /// Text compared for equality only, indexed in the database's own collation.
    PlainText,
    Blob,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Eq(Arg),
    /// `lo <= column < hi`
    Range(Arg, Arg),
    /// `lo <= column <= hi`
    Between(Arg, Arg),
}

/// One range of one column, maybe served by an index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Branch {
    pub column: &'static str,
    pub kind: Kind,
    pub bound: Bound,
    /// The index on (column, time[, id]) or (column) that serves it; `None` when there is none.
    pub index: Option<&'static str>,
    /// The index's second column is the time: rows of one value come out in time order.
    pub ordered: bool,
}

impl Branch {
    fn render(&self, s: &mut Sql) -> String {
        let col = match (self.kind, s.pg()) {
            (Kind::Text, true) => format!("{} COLLATE \"C\"", self.column),
            _ => self.column.to_string(),
        };
        match &self.bound {
            Bound::Eq(v) => format!("{col} = {}", s.arg(v.clone())),
            Bound::Range(lo, hi) => {
                let (lo, hi) = (s.arg(lo.clone()), s.arg(hi.clone()));
                format!("{col} >= {lo} AND {col} < {hi}")
            }
            Bound::Between(lo, hi) => {
                let (lo, hi) = (s.arg(lo.clone()), s.arg(hi.clone()));
                format!("{col} BETWEEN {lo} AND {hi}")
            }
        }
    }

    /// A single value whose index gives its rows in time order.
    fn is_ordered_eq(&self) -> bool {
        self.ordered && self.index.is_some() && matches!(self.bound, Bound::Eq(_))
    }
}

/// A condition on a row. The filter is the AND of its predicates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pred {
    Branch(Branch),
    Or(Vec<Pred>),
    Not(Box<Pred>),
    /// `column op value`, `op` one of ours (`<`, `>`, `>=`, `=`).
    Cmp(&'static str, &'static str, Arg),
    /// The text column contains the needle.
    Contains(&'static str, String),
    /// The text column ends with the needle (ASCII).
    EndsWith(&'static str, String),
    /// The text column contains the needle, ASCII case ignored (SQLite's LIKE, PostgreSQL's
    /// ILIKE).
    ContainsNoCase(&'static str, String),
    /// The integer column is one of these.
    IntIn(&'static str, Vec<i64>),
    /// The integer column lies in `lo..=hi`.
    IntBetween(&'static str, i64, i64),
    /// The text column is one of these.
    TextIn(&'static str, Vec<String>),
    /// One of these names (lower case) is an item of the comma list in the column, whatever
    /// the case.
    ListHasAny(&'static str, Vec<String>),
    /// A condition of ours written out, without parameters (never text from a query).
    Sql(String),
}

impl Pred {
    pub fn render(&self, s: &mut Sql) -> String {
        match self {
            Pred::Branch(b) => format!("({})", b.render(s)),
            Pred::Or(v) => {
                let parts: Vec<String> = v.iter().map(|p| p.render(s)).collect();
                format!("({})", parts.join(" OR "))
            }
            Pred::Not(p) => format!("NOT {}", p.render(s)),
            Pred::Cmp(col, op, v) => format!("({col} {op} {})", s.arg(v.clone())),
            Pred::Sql(text) => format!("({text})"),
            Pred::Contains(col, needle) => {
                let a = s.arg(Arg::Text(needle.clone()));
                if s.pg() {
                    format!("(strpos({col}, {a}) > 0)")
                } else {
                    format!("(instr({col}, {a}) > 0)")
                }
            }
            Pred::ContainsNoCase(col, needle) => {
                let a = s.arg(Arg::Text(format!("%{}%", like_escaped(needle))));
                if s.pg() {
                    format!("({col} ILIKE {a})")
                } else {
                    format!("({col} LIKE {a} ESCAPE '\\')")
                }
            }
            Pred::EndsWith(col, needle) => {
                let n = s.int(needle.chars().count() as i64);
                let a = s.arg(Arg::Text(needle.clone()));
                if s.pg() {
                    format!("(right({col}, {n}::int) = {a})")
                } else {
                    format!("(length({col}) >= {n} AND substr({col}, -{n}) = {a})")
                }
            }
            Pred::IntIn(col, vals) => {
                let list: Vec<String> = vals.iter().map(|&v| s.int(v)).collect();
                format!("({col} IN ({}))", list.join(", "))
            }
            Pred::IntBetween(col, lo, hi) => {
                let (lo, hi) = (s.int(*lo), s.int(*hi));
                format!("({col} BETWEEN {lo} AND {hi})")
            }
            Pred::TextIn(col, vals) => {
                let list: Vec<String> = vals.iter().map(|v| s.arg(Arg::Text(v.clone()))).collect();
                format!("({col} IN ({}))", list.join(", "))
            }
            Pred::ListHasAny(col, names) => {
                // LIKE on the list between commas: SQLite's LIKE ignores ASCII case by itself;
                // PostgreSQL lowers in the C collation, which costs a fraction of the
                // database's (ICU) one.
                let parts: Vec<String> = names
                    .iter()
                    .map(|n| {
                        let a = s.arg(Arg::Text(format!("%,{},%", like_escaped(n))));
                        if s.pg() {
                            format!("(',' || lower({col} COLLATE \"C\") || ',') LIKE {a}")
                        } else {
                            format!("(',' || {col} || ',') LIKE {a} ESCAPE '\\'")
                        }
                    })
                    .collect();
                format!("({})", parts.join(" OR "))
            }
        }
    }

    /// The branches whose union this predicate is, when every one has an index.
    fn branches(&self) -> Option<Vec<&Branch>> {
        match self {
            Pred::Branch(b) if b.index.is_some() => Some(vec![b]),
            Pred::Or(v) => {
                let mut out = Vec::new();
                for p in v {
                    out.extend(p.branches()?);
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// Any of `preds`; one alone stands for itself.
    pub fn any(mut preds: Vec<Pred>) -> Pred {
        if preds.len() == 1 {
            preds.remove(0)
        } else {
            Pred::Or(preds)
        }
    }
}

/// `s` matched literally by LIKE (escape character `\`, PostgreSQL's default).
fn like_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A table the searches read newest first.
pub(crate) struct Table {
    pub name: &'static str,
    /// The time column, µs since the epoch.
    pub time: &'static str,
    /// The index on (time[, id]): SQLite's rowid is the last column of every index.
    pub time_index: &'static str,
    /// The time column is the table's partition key in PostgreSQL's partitioned layout: rows
    /// looked up by id are looked up with their time as well, which reads only their days.
    pub keyed_by_time: bool,
    /// The rows the search may see at all, when not every row of the table (`cdr_id IS
    /// NULL`: the streams without a call). Every index the search names is partial on it,
    /// so it is in every statement that reads through one.
    pub only: Option<&'static str>,
}

impl Table {
    /// `" AND {only}"`, or nothing.
    fn and_only(&self) -> String {
        self.only.map(|o| format!(" AND {o}")).unwrap_or_default()
    }
}

/// Which rows a search may see at all: a time range and the keyset cursor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scope {
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub after: Option<Cursor>,
}

impl Scope {
    fn render(&self, t: &Table, s: &mut Sql) -> String {
        let time = t.time;
        let mut parts = Vec::new();
        if let Some(v) = self.from_us {
            parts.push(format!("{time} >= {}", s.int(v)));
        }
        if let Some(v) = self.to_us {
            parts.push(format!("{time} < {}", s.int(v)));
        }
        if let Some(c) = self.after {
            let (a, b) = (s.int(c.time_us), s.int(c.id));
            // The first term bounds the index range; the second breaks ties on equal times.
            parts.push(format!("{time} <= {a} AND ({time} < {a} OR id < {b})"));
        }
        if let Some(o) = t.only {
            parts.push(o.to_string());
        }
        if parts.is_empty() {
            "1 = 1".to_string()
        } else {
            parts.join(" AND ")
        }
    }
}

/// The time of the newest row the table holds for a search (of any filter), `None` when it
/// holds none: one step down the time index.
pub(crate) fn newest(x: &mut dyn Exec, t: &Table) -> Result<Option<i64>, CdrError> {
    let mut s = Sql::new(x.dialect());
    let hint = indexed_by(&s, Some(t.time_index));
    s.text = format!(
        "SELECT {time} FROM {}{hint} WHERE 1 = 1{} ORDER BY {time} DESC LIMIT 1",
        t.name,
        t.and_only(),
        time = t.time
    );
    let row = x.rows(&s)?.into_iter().next();
    row.map(|r| Cols::new(r).i64()).transpose()
}

/// How a search reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Predicate `n` is served by its index: every entry it matches is read and sorted by time
    /// (fewer than [`INDEX_MATCHES_MAX`]).
    Index(usize),
    /// Newest first along the time index (`None`) or along predicate `n`'s index for its single
    /// value, reading at most the row budget, the other predicates checked on each row.
    Walk(Option<usize>),
}

/// Entries of one branch, counted up to [`INDEX_MATCHES_MAX`]: within the scope when the index
/// orders the branch's rows by time, else over all time (so that a count never reads more
/// than the cap, however narrow the time range).
fn count_branch(x: &mut dyn Exec, t: &Table, scope: &Scope, b: &Branch) -> Result<i64, CdrError> {
    let mut s = Sql::new(x.dialect());
    let cond = b.render(&mut s);
    let scope_sql = if b.is_ordered_eq() {
        format!(" AND {}", scope.render(t, &mut s))
    } else {
        t.and_only()
    };
    let cap = s.int(INDEX_MATCHES_MAX);
    let hint = indexed_by(&s, b.index);
    s.text = format!(
        "SELECT count(*) FROM (SELECT 1 FROM {}{hint} WHERE {cond}{scope_sql} LIMIT {cap}) c",
        t.name
    );
    let rows = x.rows(&s)?;
    let mut c = Cols::new(rows.into_iter().next().unwrap_or_default());
    c.i64()
}

/// SQLite's `INDEXED BY`, which makes the plan the one chosen here.
fn indexed_by(s: &Sql, index: Option<&str>) -> String {
    match (s.dialect, index) {
        (Dialect::Sqlite, Some(i)) => format!(" INDEXED BY {i}"),
        _ => String::new(),
    }
}

/// Chooses the plan: the indexed predicate with the fewest entries when they are fewer than
/// [`INDEX_MATCHES_MAX`]; else a walk along a single number's index, if one is asked for;
/// else a walk along the time index.
pub(crate) fn choose(
    x: &mut dyn Exec,
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
) -> Result<Plan, CdrError> {
    let mut best: Option<(i64, usize)> = None;
    let mut ordered: Option<usize> = None;
    for (i, p) in preds.iter().enumerate() {
        let Some(branches) = p.branches() else {
            continue;
        };
        if branches.len() == 1 && branches[0].is_ordered_eq() && ordered.is_none() {
            ordered = Some(i);
        }
        let mut n = 0;
        for b in branches {
            n += count_branch(x, t, scope, b)?;
            if n >= INDEX_MATCHES_MAX {
                break;
            }
        }
        if n < INDEX_MATCHES_MAX && best.is_none_or(|(m, _)| n < m) {
            best = Some((n, i));
        }
    }
    Ok(match (best, ordered) {
        (Some((_, i)), _) => Plan::Index(i),
        (None, o) => Plan::Walk(o),
    })
}

/// The AND of every predicate but `except`, `1 = 1` when none.
fn rest(preds: &[Pred], except: Option<usize>, s: &mut Sql) -> String {
    let parts: Vec<String> = preds
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != except)
        .map(|(_, p)| p.render(s))
        .collect();
    if parts.is_empty() {
        "1 = 1".to_string()
    } else {
        parts.join(" AND ")
    }
}

/// The union of the driving predicate's branches, each read through its own index, as rows of
/// `{time} AS t, id AS i` and then `extra` (more columns), with the scope and the other
/// predicates applied.
fn index_union(
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
    driver: usize,
    extra: &str,
    s: &mut Sql,
) -> String {
    let branches = preds[driver].branches().unwrap_or_default();
    let parts: Vec<String> = branches
        .iter()
        .map(|b| {
            let hint = indexed_by(s, b.index);
            let cond = b.render(s);
            let sc = scope.render(t, s);
            let r = rest(preds, Some(driver), s);
            format!(
                "SELECT {} AS t, id AS i{extra} FROM {}{hint} WHERE {cond} AND {sc} AND {r}",
                t.time, t.name
            )
        })
        .collect();
    parts.join(" UNION ")
}

/// The keys (newest first, at most `want`) of the rows an index plan finds.
pub(crate) fn index_keys(
    x: &mut dyn Exec,
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
    driver: usize,
    want: usize,
) -> Result<Vec<Cursor>, CdrError> {
    let mut s = Sql::new(x.dialect());
    let union = index_union(t, scope, preds, driver, "", &mut s);
    let lim = s.int(want as i64);
    s.text = match s.dialect {
        // SQLite reads each branch through the index named and sorts what they found.
        Dialect::Sqlite => {
            format!("SELECT t, i FROM ({union}) u ORDER BY t DESC, i DESC LIMIT {lim}")
        }
        // MATERIALIZED keeps PostgreSQL from turning this back into a walk of the time index
        // with a filter, the plan its estimate of LIMIT's cost can prefer.
        Dialect::Postgres => format!(
            "WITH u AS MATERIALIZED ({union}) SELECT t, i FROM u ORDER BY t DESC, i DESC LIMIT {lim}"
        ),
    };
    x.rows(&s)?
        .into_iter()
        .map(|r| {
            let mut c = Cols::new(r);
            Ok(Cursor {
                time_us: c.i64()?,
                id: c.i64()?,
            })
        })
        .collect()
}

/// The ids among `keys` whose rows meet every one of `preds`.
pub(crate) fn matching_ids(
    x: &mut dyn Exec,
    t: &Table,
    keys: &[Cursor],
    preds: &[Pred],
) -> Result<Vec<i64>, CdrError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut s = Sql::new(x.dialect());
    let ids: Vec<String> = keys.iter().map(|k| s.int(k.id)).collect();
    let times = time_list(t, keys, &mut s);
    let r = rest(preds, None, &mut s);
    s.text = format!(
        "SELECT id FROM {} WHERE id IN ({}){times} AND {r}",
        t.name,
        ids.join(", ")
    );
    x.rows(&s)?
        .into_iter()
        .map(|row| Cols::new(row).i64())
        .collect()
}

/// ` AND {time} IN (...)`, the distinct times of `keys`, for a PostgreSQL table whose time is
/// its partition key ([`Table::keyed_by_time`]): a lookup by id then reads the keys' days only.
/// Empty otherwise.
pub(crate) fn time_list(t: &Table, keys: &[Cursor], s: &mut Sql) -> String {
    if !(s.pg() && t.keyed_by_time) || keys.is_empty() {
        return String::new();
    }
    let mut times: Vec<i64> = keys.iter().map(|k| k.time_us).collect();
    times.sort_unstable();
    times.dedup();
    let list: Vec<String> = times.into_iter().map(|v| s.int(v)).collect();
    format!(" AND {} IN ({})", t.time, list.join(", "))
}

/// A walk: rows newest first from the time index (or the driving predicate's index for its one
/// value), each with whether the other predicates hold.
/// SQLite: `t, i, m` for the backend to step through until it has enough. PostgreSQL: the
/// server stops at `want` matches or `budget` rows and also returns the `budget`-th row read
/// (`rn`), so that one round trip tells where the next page starts.
pub(crate) fn walk_sql(
    d: Dialect,
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
    source: Option<usize>,
    want: usize,
    budget: usize,
) -> Sql {
    let mut s = Sql::new(d);
    let (index, src) = match source.and_then(|i| preds[i].branches()) {
        Some(b) => (b[0].index, b[0].render(&mut s)),
        None => (Some(t.time_index), "1 = 1".to_string()),
    };
    let sc = scope.render(t, &mut s);
    let m = rest(preds, source, &mut s);
    let time = t.time;
    let name = t.name;
    let order = format!("{time} DESC, id DESC");
    s.text = match d {
        Dialect::Sqlite => {
            let hint = indexed_by(&s, index);
            format!(
                "SELECT {time}, id, CASE WHEN {m} THEN 1 ELSE 0 END FROM {name}{hint} \
                 WHERE {src} AND {sc} ORDER BY {order}"
            )
        }
        Dialect::Postgres => {
            let b = s.int(budget as i64);
            let w = s.int(want as i64);
            format!(
                "SELECT t, i, m, rn FROM (SELECT {time} AS t, id AS i, \
                 CASE WHEN {m} THEN 1 ELSE 0 END AS m, row_number() OVER (ORDER BY {order}) AS rn \
                 FROM {name} WHERE {src} AND {sc} ORDER BY {order} LIMIT {b}) w \
                 WHERE m = 1 OR rn = {b} ORDER BY t DESC, i DESC LIMIT {w}"
            )
        }
    };
    s
}

/// Totals by bucket `(time - base) / width_us` over the rows an index plan finds (`source`
/// `Plan::Index`) or over the newest `cap` rows of a walk. Per bucket: its number, matching
/// rows, answered, sum and count of MOS, lowest MOS, rows read, earliest time read. Without
/// `grouped` a walk returns one row, bucket number 0, for the whole scope (SQLite sorts for a
/// GROUP BY, so it is asked bucket by bucket instead; see [`crate::search`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn totals_sql(
    d: Dialect,
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
    plan: Plan,
    base_us: i64,
    width_us: i64,
    cap: usize,
    grouped: bool,
) -> Sql {
    let mut s = Sql::new(d);
    let answered = "CASE WHEN answer_us IS NULL THEN 0 ELSE 1 END";
    s.text = match plan {
        Plan::Index(driver) => {
            let union = index_union(
                t,
                scope,
                preds,
                driver,
                &format!(", {answered} AS a, mos_min AS mos"),
                &mut s,
            );
            let (base, width) = (s.int(base_us), s.int(width_us));
            format!(
                "SELECT (t - {base}) / {width} AS b, count(*), sum(a), sum(mos), count(mos), \
                 min(mos), count(*), min(t) FROM ({union}) u GROUP BY b"
            )
        }
        Plan::Walk(source) => {
            let (index, src) = match source.and_then(|i| preds[i].branches()) {
                Some(b) => (b[0].index, b[0].render(&mut s)),
                None => (Some(t.time_index), "1 = 1".to_string()),
            };
            let sc = scope.render(t, &mut s);
            let m = rest(preds, source, &mut s);
            let hint = indexed_by(&s, index);
            let cap = s.int(cap as i64);
            let (bucket, group) = if grouped {
                let (base, width) = (s.int(base_us), s.int(width_us));
                (format!("(t - {base}) / {width}"), " GROUP BY b")
            } else {
                ("0".to_string(), "")
            };
            let time = t.time;
            format!(
                "SELECT {bucket} AS b, sum(m), sum(m * a), \
                 sum(CASE WHEN m = 1 THEN mos END), count(CASE WHEN m = 1 THEN mos END), \
                 min(CASE WHEN m = 1 THEN mos END), count(*), min(t) \
                 FROM (SELECT {time} AS t, {answered} AS a, mos_min AS mos, \
                 CASE WHEN {m} THEN 1 ELSE 0 END AS m FROM {}{hint} WHERE {src} AND {sc} \
                 ORDER BY {time} DESC, id DESC LIMIT {cap}) w{group}",
                t.name
            )
        }
    };
    s
}

/// The next string after every string that starts with `p` (`12` → `13`): the exclusive end
/// of a prefix range. `p` is ASCII without DEL (the pattern's characters), so the last byte
/// can be raised.
pub(crate) fn prefix_end(p: &str) -> String {
    let mut b = p.as_bytes().to_vec();
    if let Some(last) = b.last_mut() {
        *last += 1;
    }
    String::from_utf8(b).unwrap_or_else(|_| format!("{p}\u{10FFFF}"))
}
