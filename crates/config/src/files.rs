//! Files the config names (access lists, JWT keys, JWKS documents, Redis TLS files), and the
//! config file itself, read with a bound: a name such as `/dev/zero`, a FIFO or a runaway log
//! must not make `tollgate check` (or a reload) grow without limit, or hang.

use crate::reader::Cx;
use std::io::{Error, ErrorKind, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The most bytes a file read for the config may hold.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// `full` read whole, as [`std::fs::read`] does, but only a regular file (symbolic links
/// followed) of at most [`MAX_FILE_BYTES`]. The errors say why in the words of an
/// [`std::io::Error`], so each caller reports them as it reports any other read error (at the
/// key that named the file). A file held in memory ([`crate::mounted`]) is read from there.
pub fn read_bounded(full: &Path) -> std::io::Result<Vec<u8>> {
    read_at_most(full, MAX_FILE_BYTES)
}

/// [`read_bounded`] as text, as [`std::fs::read_to_string`] does.
pub(crate) fn read_bounded_text(full: &Path) -> std::io::Result<String> {
    String::from_utf8(read_bounded(full)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// How a file of entries writes its comments.
#[derive(Clone, Copy)]
pub(crate) enum Comments {
    /// `#` starts a comment anywhere on a line (list files: addresses, patterns).
    Anywhere,
    /// Only a line starting with `#` is a comment (htpasswd and key files: a hash or a key may
    /// hold `#`).
    WholeLine,
}

/// The entries of a file the config names (at `path`, written `file`, relative to `base`): one
/// per line, blank lines and comments skipped, each checked by `item`. The first ten bad lines
/// are reported with the file and line (a broken file should not print a million), the rest
/// counted. `item` gets the line's number (from 1) and its text. The file read and how many
/// lines were bad; `None` when it could not be read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn entries(
    cx: &mut Cx,
    path: &str,
    file: &str,
    span: Range<usize>,
    base: &Path,
    files: &mut Vec<PathBuf>,
    comments: Comments,
    mut item: impl FnMut(usize, &str) -> Result<(), String>,
) -> Option<(PathBuf, usize)> {
    let full = base.join(file);
    let text = match read_bounded_text(&full) {
        Ok(t) => t,
        Err(e) => {
            cx.err(path, span, format!("cannot read {}: {e}", full.display()));
            return None;
        }
    };
    files.push(full.clone());
    let mut bad = 0;
    for (n, line) in text.lines().enumerate() {
        let entry = match comments {
            Comments::Anywhere => line.split('#').next().unwrap_or(""),
            Comments::WholeLine if line.trim_start().starts_with('#') => "",
            Comments::WholeLine => line,
        }
        .trim();
        if entry.is_empty() {
            continue;
        }
        if let Err(why) = item(n + 1, entry) {
            bad += 1;
            if bad <= 10 {
                cx.err(path, span.clone(), format!("{file} line {}: {why}", n + 1));
            }
        }
    }
    if bad > 10 {
        cx.err(path, span, format!("{file}: {} more bad lines", bad - 10));
    }
    Some((full, bad))
}

fn read_at_most(full: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let too_big = || {
        Error::new(
            ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, the most a file named in the config may hold",
                max >> 20
            ),
        )
    };
    if let Some(held) = crate::mounted::read(full) {
        if held.len() as u64 > max {
            return Err(too_big());
        }
        return Ok(held.to_vec());
    }
    // Looked at before opening: opening a FIFO would wait for a writer.
    let meta = std::fs::metadata(full)?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, a FIFO or a directory is not read)",
        ));
    }
    if meta.len() > max {
        return Err(too_big());
    }
    let file = std::fs::File::open(full)?;
    // It may have grown since (or been swapped): never more than the bound and one byte.
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_big());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-files-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[cfg(unix)]
    #[test]
    fn dev_zero_and_directories_are_refused_at_once() {
        let start = Instant::now();
        for p in ["/dev/zero", "/"] {
            let e = read_bounded(Path::new(p)).expect_err("refused");
            assert_eq!(
                e.to_string(),
                "not a regular file (a device, a FIFO or a directory is not read)"
            );
        }
        assert!(start.elapsed().as_secs() < 1);
    }

    #[test]
    fn a_file_one_byte_over_the_bound_is_refused() {
        let d = dir("bound");
        let over = d.join("over.txt");
        std::fs::File::create(&over)
            .and_then(|f| f.set_len(MAX_FILE_BYTES + 1))
            .expect("sparse file");
        let e = read_bounded(&over).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "larger than 64 MiB, the most a file named in the config may hold"
        );
        let small = d.join("small.txt");
        std::fs::write(&small, "0123456789").expect("write");
        assert!(read_at_most(&small, 9).is_err());
        assert_eq!(read_at_most(&small, 10).expect("read"), b"0123456789");
        assert_eq!(read_bounded_text(&small).expect("read"), "0123456789");
        std::fs::write(&small, [0xff, 0xfe]).expect("write");
        assert!(read_bounded_text(&small).is_err());
        std::fs::remove_dir_all(&d).expect("clean up");
    }
}
