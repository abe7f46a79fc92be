//! Access logs read a line at a time: a [`Reader`] turns each line of one of four [`Format`]s
//! into a [`Record`], or a [`LineError`] that names the line and goes on with the next.
//!
//! Lines are read into one reused buffer, JSON is read key by key without building a map, and
//! the other formats are scanned by hand; a record's own strings are the only allocations.

mod csv;
mod json;
mod nginx;
mod time;
mod tollgate;

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, Read};
use std::net::IpAddr;
use std::path::Path;

/// One request read from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When the request was logged, in Unix nanoseconds.
    pub time: u64,
    /// The method as sent: `GET`.
    pub method: String,
    /// The Host as logged; `None` when the format has none or it was empty.
    pub host: Option<String>,
    /// Path and query as sent, always starting with `/`: an absolute-form target
    /// (`http://h/p?q`) is split into its host (kept when the line had none) and `/p?q`.
    pub target: String,
    /// Who sent it, when the line says.
    pub client: Option<Client>,
    /// Request headers the line carries, names in lowercase.
    pub headers: Vec<(String, String)>,
}

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// The client's address.
    Ip(IpAddr),
    /// Tollgate's pseudonym for the client (its log holds no addresses unless asked to).
    Pseudonym(u64),
}

/// The formats a [`Reader`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Tollgate's own log: JSON lines from tracing-subscriber (flattened events). Lines with
    /// `"event":"request"` are requests (`timestamp`, `method`, `host`, `path`, `client`
    /// pseudonym, `client_ip` preferred when present); every other line is skipped.
    Tollgate,
    /// nginx's `combined` format, and formats that append fields to it such as
    /// ingress-nginx's default `upstreaminfo`: `$remote_addr - $remote_user [$time_local]
    /// "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" ...`. `\xHH`
    /// and `\"` escapes in quoted fields are decoded; referer and user-agent become headers.
    /// ingress-nginx controller lines mixed in (klog lines, nginx error-log lines, the
    /// start-up banner) are skipped.
    NginxCombined,
    /// nginx JSON lines (`log_format ... escape=json '{...}'`). Time from `msec`, else
    /// `time_iso8601`, `time`, `timestamp` (RFC 3339, Unix seconds or `$time_local`), else
    /// `time_local`; method from `request_method` or `method`; target from `request_uri`, else
    /// `uri` + `args`, else `path` + `request_query` (ingress-nginx's JSON example), else
    /// `request`; host from `host`, `http_host`, `vhost`, `server_name`; client from
    /// `remote_addr` (when empty, as ingress-nginx's `$proxy_protocol_addr` is without the
    /// PROXY protocol: the first address of `x_forwarded_for`); every other `http_x_y` key is
    /// header `x-y`. Values "" and "-" are absent.
    NginxJson,
    /// Comma-separated values with a header line naming the columns `time` (Unix seconds,
    /// fraction allowed; RFC 3339 is accepted too), `method`, `host`, `path`, `client` (an
    /// address, may be empty), in any order; every other column is a request header of that
    /// name. RFC 4180 quoting (`"a,""b"""`), though a field cannot span lines. Empty cells are
    /// absent.
    Csv,
}

impl Format {
    /// Its name in messages: `tollgate`, `nginx-combined`, `nginx-json`, `csv`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tollgate => "tollgate",
            Format::NginxCombined => "nginx-combined",
            Format::NginxJson => "nginx-json",
            Format::Csv => "csv",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A line that could not be read as a request: `line N: why`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based.
    pub line: u64,
    pub why: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

impl std::error::Error for LineError {}

/// Longer lines are errors (and are not kept in memory).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// When the format is to be detected, at most this many lines that tell nothing (such as the
/// ingress-nginx controller's banner) are looked through before giving up.
const DETECT_LINES: usize = 100;

/// What a line holds.
enum Parsed {
    Record(Record),
    /// Not a request: counted in [`Reader::skipped`].
    Skip,
}

/// A line read before the format was known.
struct Pending {
    line: u64,
    bytes: Vec<u8>,
    too_long: bool,
}

/// Reads [`Record`]s from a log, one line at a time.
///
/// Every line is exactly one of: a record, a [`LineError`], or skipped (blank, not a request,
/// or the CSV header). A malformed line is an `Err` and reading goes on; an I/O error is an
/// `Err` that ends the iteration (see [`Reader::io_error`]).
pub struct Reader<R: BufRead> {
    input: R,
    format: Format,
    csv: Option<csv::Columns>,
    buf: Vec<u8>,
    pending: VecDeque<Pending>,
    line: u64,
    skipped: u64,
    io_error: Option<io::Error>,
    done: bool,
}

impl<R: BufRead> Reader<R> {
    /// A reader of `input` in `format`, or of the format its first non-empty line shows when
    /// `None` (lines that show nothing, such as a banner, are looked through too). A CSV header
    /// is read here: one that lacks a required column is an error (`InvalidData`, wrapping a
    /// [`LineError`]); so is a log whose format cannot be told. An empty input reads as
    /// [`Format::Tollgate`] with no records.
    pub fn new(input: R, format: Option<Format>) -> io::Result<Self> {
        let mut reader = Reader {
            input,
            format: format.unwrap_or(Format::Tollgate),
            csv: None,
            buf: Vec::with_capacity(1024),
            pending: VecDeque::new(),
            line: 0,
            skipped: 0,
            io_error: None,
            done: false,
        };
        match format {
            None => reader.detect()?,
            Some(Format::Csv) => reader.csv_header()?,
            Some(_) => {}
        }
        Ok(reader)
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Lines that are not requests: blank lines, Tollgate's other events, the CSV header,
    /// ingress-nginx controller lines in a combined log.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Lines read so far (records, errors and skipped lines; lines read ahead to detect the
    /// format included).
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// The I/O error that ended the iteration, if one did.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.io_error.as_ref()
    }

    /// Reads the next line into `buf`: `None` at the end, else whether it was too long (then
    /// `buf` holds its start and the rest was read past). A UTF-8 byte-order mark starting the
    /// first line is dropped.
    fn read_line(&mut self) -> io::Result<Option<bool>> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if self.line == 1 && self.buf.starts_with(b"\xEF\xBB\xBF") {
            self.buf.drain(..3);
        }
        if n <= MAX_LINE_BYTES || self.buf.last() == Some(&b'\n') {
            return Ok(Some(false));
        }
        loop {
            let available = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            if let Some(i) = available.iter().position(|&b| b == b'\n') {
                self.input.consume(i + 1);
                break;
            }
            let n = available.len();
            self.input.consume(n);
        }
        Ok(Some(true))
    }

    /// Reads lines until one shows the format; those that do not are kept to be read again.
    fn detect(&mut self) -> io::Result<()> {
        let mut unknown = 0;
        while let Some(too_long) = self.read_line()? {
            let line = trim_line(&self.buf);
            if !too_long && is_blank(line) {
                self.skipped += 1;
                continue;
            }
            match detect_line(line).filter(|_| !too_long) {
                Some(Format::Csv) => {
                    self.format = Format::Csv;
                    return self.csv_columns();
                }
                Some(format) => {
                    self.format = format;
                    self.keep_line(too_long);
                    return Ok(());
                }
                None => {
                    self.keep_line(too_long);
                    unknown += 1;
                    if unknown == DETECT_LINES {
                        break;
                    }
                }
            }
        }
        match self.pending.front() {
            None => Ok(()),
            Some(first) => {
                let start = String::from_utf8_lossy(&first.bytes);
                let why = format!(
                    "cannot tell the log format (Tollgate JSON, nginx combined or JSON, CSV \
                     with a header) from {}",
                    show(trim_line_str(&start))
                );
                Err(invalid(LineError {
                    line: first.line,
                    why,
                }))
            }
        }
    }

    fn keep_line(&mut self, too_long: bool) {
        self.pending.push_back(Pending {
            line: self.line,
            bytes: self.buf.clone(),
            too_long,
        });
    }

    /// Reads the CSV header: the first line that is not blank.
    fn csv_header(&mut self) -> io::Result<()> {
        while let Some(too_long) = self.read_line()? {
            if too_long || !is_blank(trim_line(&self.buf)) {
                return self.csv_columns();
            }
            self.skipped += 1;
        }
        Ok(())
    }

    /// Takes the line in `buf` as the CSV header.
    fn csv_columns(&mut self) -> io::Result<()> {
        let columns = csv::Columns::new(trim_line(&self.buf)).map_err(|why| {
            invalid(LineError {
                line: self.line,
                why,
            })
        })?;
        self.csv = Some(columns);
        self.skipped += 1;
        Ok(())
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Record, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (line, parsed) = if let Some(p) = self.pending.pop_front() {
                let parsed = if p.too_long {
                    Err(too_long())
                } else {
                    parse_line(self.format, self.csv.as_ref(), trim_line(&p.bytes))
                };
                (p.line, parsed)
            } else {
                if self.done {
                    return None;
                }
                match self.read_line() {
                    Ok(None) => {
                        self.done = true;
                        return None;
                    }
                    Ok(Some(true)) => (self.line, Err(too_long())),
                    Ok(Some(false)) => {
                        let parsed =
                            parse_line(self.format, self.csv.as_ref(), trim_line(&self.buf));
                        (self.line, parsed)
                    }
                    Err(e) => {
                        self.done = true;
                        let why = format!("read error: {e}");
                        self.io_error = Some(e);
                        return Some(Err(LineError {
                            line: self.line + 1,
                            why,
                        }));
                    }
                }
            };
            match parsed {
                Ok(Parsed::Record(r)) => return Some(Ok(r)),
                Ok(Parsed::Skip) => self.skipped += 1,
                Err(why) => return Some(Err(LineError { line, why })),
            }
        }
    }
}

/// Opens a log and detects its format; a path ending `.csv` is read as [`Format::Csv`].
pub fn open(path: &Path) -> io::Result<Reader<io::BufReader<std::fs::File>>> {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let file = std::fs::File::open(path)?;
    Reader::new(
        io::BufReader::with_capacity(256 * 1024, file),
        csv.then_some(Format::Csv),
    )
}

fn parse_line(format: Format, csv: Option<&csv::Columns>, line: &[u8]) -> Result<Parsed, String> {
    if is_blank(line) {
        return Ok(Parsed::Skip);
    }
    match format {
        Format::Tollgate => tollgate::parse(line),
        Format::NginxCombined => nginx::combined(line),
        Format::NginxJson => nginx::json(line),
        Format::Csv => match csv {
            Some(columns) => columns.parse(line),
            None => Err("no CSV header".to_owned()),
        },
    }
}

/// The format a line shows, if any.
fn detect_line(line: &[u8]) -> Option<Format> {
    let start = line.trim_ascii_start();
    if start.starts_with(b"{") {
        json_format(start)
    } else if nginx::looks_combined(start) {
        Some(Format::NginxCombined)
    } else if csv::looks_like_header(start) {
        Some(Format::Csv)
    } else {
        None
    }
}

/// Which JSON format a line is: by its keys, or (when the line does not parse) by what keys
/// it seems to hold.
fn json_format(line: &[u8]) -> Option<Format> {
    match json::object::<json::Keys>(line) {
        Ok(keys) => {
            if keys.event || keys.timestamp_and_level == (true, true) {
                Some(Format::Tollgate)
            } else if keys.nginx {
                Some(Format::NginxJson)
            } else {
                None
            }
        }
        Err(_) => {
            let has = |key: &str| {
                let quoted = format!("\"{key}\":");
                line.windows(quoted.len()).any(|w| w == quoted.as_bytes())
            };
            if has("event") || (has("timestamp") && has("level")) {
                Some(Format::Tollgate)
            } else if json::NGINX_KEYS.iter().any(|k| has(k)) {
                Some(Format::NginxJson)
            } else {
                None
            }
        }
    }
}

fn invalid(e: LineError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn too_long() -> String {
    format!("line longer than {MAX_LINE_BYTES} bytes")
}

/// The line without its `\n` or `\r\n`.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_line_str(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r'])
}

fn is_blank(line: &[u8]) -> bool {
    match line.first() {
        None => true,
        Some(b) if b.is_ascii_whitespace() => line.iter().all(u8::is_ascii_whitespace),
        Some(_) => false,
    }
}

/// A value from a log in a message: quoted, escaped, and cut at 60 characters.
fn show(s: &str) -> String {
    const MAX: usize = 60;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{:?}…", &s[..i]),
        None => format!("{s:?}"),
    }
}

/// An HTTP method: a token (RFC 9110).
fn method(m: &str) -> Result<String, String> {
    let token = !m.is_empty()
        && m.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        Ok(m.to_owned())
    } else {
        Err(format!("bad method {}", show(m)))
    }
}

/// The target as a path and query; an absolute-form target gives its host to `host` when that
/// is `None`.
fn target(t: &str, host: &mut Option<String>) -> Result<String, String> {
    if t.starts_with('/') {
        return Ok(t.to_owned());
    }
    let rest = ["http://", "https://"].iter().find_map(|scheme| {
        t.get(..scheme.len())
            .filter(|s| s.eq_ignore_ascii_case(scheme))
            .map(|_| &t[scheme.len()..])
    });
    let Some(rest) = rest else {
        return Err(format!(
            "target {} is neither a path nor an absolute URL",
            show(t)
        ));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    if host.is_none() && !authority.is_empty() {
        *host = Some(authority.to_owned());
    }
    let path = &rest[end..];
    Ok(if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    })
}

/// A client address; `unix:` (nginx's for a Unix socket) is none.
fn client_ip(s: &str) -> Result<Option<Client>, String> {
    if s.starts_with("unix:") {
        return Ok(None);
    }
    match s.parse::<IpAddr>() {
        Ok(ip) => Ok(Some(Client::Ip(ip))),
        Err(_) => Err(format!("bad client address {}", show(s))),
    }
}

/// `METHOD target HTTP/x`, as a request line is logged.
fn request_line(req: &str) -> Result<(&str, &str), String> {
    let mut parts = req.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && v.starts_with("HTTP/") => Ok((m, t)),
        _ => Err(format!(
            "request {} is not \"METHOD target HTTP/version\"",
            show(req)
        )),
    }
}

#[cfg(test)]
mod tests;
