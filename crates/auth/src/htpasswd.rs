//! Verifying a password against a hash `htpasswd` wrote: bcrypt (`$2y$`, by the `bcrypt`
//! crate), apr1 and MD5 crypt (`$apr1$`, `$1$`: the MD5-crypt algorithm on the `md-5` crate)
//! and SHA-1 (`{SHA}`, ring). Every comparison is constant-time; a malformed hash never
//! verifies and never panics. The config refused any other format at load.

use base64::Engine;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

/// Whether `password` matches `hash`.
pub fn verify(hash: &str, password: &[u8]) -> bool {
    if hash.starts_with("$2") {
        // bcrypt reads at most 72 bytes, as Apache's does.
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    if let Some(rest) = hash.strip_prefix("$apr1$") {
        return md5_crypt(b"$apr1$", rest, password);
    }
    if let Some(rest) = hash.strip_prefix("$1$") {
        return md5_crypt(b"$1$", rest, password);
    }
    if let Some(b) = hash.strip_prefix("{SHA}") {
        let Ok(want) = base64::engine::general_purpose::STANDARD.decode(b) else {
            return false;
        };
        let got = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
        return bool::from(got.as_ref().ct_eq(&want));
    }
    false
}

/// Whether this hash is slow to check on purpose (bcrypt): checked off the event loop.
pub fn is_slow(hash: &str) -> bool {
    hash.starts_with("$2")
}

/// What checking a password against a hash costs, in an order: `{SHA}` < MD5 crypt < bcrypt
/// by cost (bcrypt's work doubles with each step of its cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    Sha1,
    Md5,
    Bcrypt(u32),
}

impl Work {
    pub fn of(hash: &str) -> Work {
        if hash.starts_with("$2") {
            Work::Bcrypt(hash.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(4))
        } else if hash.starts_with('{') {
            Work::Sha1
        } else {
            Work::Md5
        }
    }

    /// A well-formed hash of this kind and cost that no password verifies (its checksum is
    /// all zero bits, which bcrypt, MD5 crypt and SHA-1 do not output for any input anyone
    /// can find): checking against it costs what checking a real one does.
    pub fn decoy(self) -> String {
        match self {
            // 22 characters of salt, 31 of checksum, in bcrypt's base 64 ('.' is 0).
            Work::Bcrypt(cost) => format!("$2y${cost:02}${}", ".".repeat(53)),
            Work::Md5 => format!("$apr1$decoysal${}", ".".repeat(22)),
            Work::Sha1 => "{SHA}AAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_string(),
        }
    }

    fn same_kind(self, other: Work) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }

    /// The costliest work of each kind among `hashes`, strongest first: what every failed
    /// check of a file costs in all ([`Work::padding`]).
    pub fn kinds<'a>(hashes: impl Iterator<Item = &'a str>) -> Vec<Work> {
        let mut kinds: Vec<Work> = Vec::new();
        for w in hashes.map(Work::of) {
            match kinds.iter_mut().find(|k| k.same_kind(w)) {
                Some(k) => *k = (*k).max(w),
                None => kinds.push(w),
            }
        }
        kinds.sort_by(|a, b| b.cmp(a));
        kinds
    }

    /// The decoy checks that bring a failed check of this work up to the whole of `kinds`
    /// (one check of each kind at its costliest): the decoy of every other kind, and for a
    /// cheaper bcrypt, bcrypt at each cost from this one's to the costliest (2^c + 2^c +
    /// 2^(c+1) + ... + 2^(C-1) = 2^C). So every wrong password of a file costs the same sum,
    /// whatever the user's hash (an unknown user's own check is the strongest kind's decoy).
    pub fn padding(self, kinds: &[Work]) -> Vec<String> {
        let mut out = Vec::new();
        for &k in kinds {
            match (self, k) {
                (Work::Bcrypt(c), Work::Bcrypt(t)) => {
                    out.extend((c..t).map(|n| Work::Bcrypt(n).decoy()))
                }
                (me, k) if me.same_kind(k) => {}
                (_, k) => out.push(k.decoy()),
            }
        }
        out
    }
}

/// The 64 characters crypt's base 64 writes with.
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Poul-Henning Kamp's MD5 crypt (`magic` `$1$`, or Apache's `$apr1$`): `rest` is
/// `SALT$CHECKSUM`.
fn md5_crypt(magic: &[u8], rest: &str, password: &[u8]) -> bool {
    let Some((salt, sum)) = rest.split_once('$') else {
        return false;
    };
    let salt = &salt.as_bytes()[..salt.len().min(8)];
    let got = md5_crypt_sum(magic, salt, password);
    bool::from(got.as_slice().ct_eq(sum.as_bytes()))
}

fn md5_crypt_sum(magic: &[u8], salt: &[u8], pw: &[u8]) -> Vec<u8> {
    let alt = Md5::new()
        .chain_update(pw)
        .chain_update(salt)
        .chain_update(pw)
        .finalize();
    let mut ctx = Md5::new()
        .chain_update(pw)
        .chain_update(magic)
        .chain_update(salt);
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(pw);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    let mut out = Vec::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize]);
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(
            (u32::from(fin[a]) << 16) | (u32::from(fin[b]) << 8) | u32::from(fin[c]),
            4,
        );
    }
    put(u32::from(fin[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Made with `openssl passwd -apr1 -salt lZL6V/ci password` and `htpasswd -nbs`.
        assert!(verify("$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00", b"password"));
        assert!(!verify(
            "$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00",
            b"passwore"
        ));
        assert!(verify("{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", b"password"));
        assert!(!verify("{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", b""));
        // `openssl passwd -1 -salt saltsalt password`.
        assert!(verify("$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/", b"password"));
        let b = bcrypt::hash_with_result("secret", 4)
            .expect("hash")
            .format_for_version(bcrypt::Version::TwoY);
        assert!(verify(&b, b"secret"));
        assert!(!verify(&b, b"secreT"));
    }

    #[test]
    fn decoys_are_well_formed_and_verify_nothing() {
        for w in [Work::Sha1, Work::Md5, Work::Bcrypt(4), Work::Bcrypt(5)] {
            let d = w.decoy();
            assert_eq!(Work::of(&d), w, "{d}");
            for pw in [&b""[..], b"password", b"\0", &[0xffu8; 80][..]] {
                assert!(!verify(&d, pw), "{d}");
            }
        }
        assert_eq!(Work::Bcrypt(10).decoy().len(), 60);
        // A bcrypt decoy is parsed and computed, not refused early: it costs a real check.
        let real = bcrypt::hash_with_result("x", 6)
            .expect("hash")
            .format_for_version(bcrypt::Version::TwoY);
        let time = |h: &str| {
            let t = std::time::Instant::now();
            for _ in 0..3 {
                let _ = verify(h, b"guess");
            }
            t.elapsed()
        };
        let (decoy, genuine) = (time(&Work::Bcrypt(6).decoy()), time(&real));
        assert!(
            decoy * 2 > genuine && genuine * 2 > decoy,
            "{decoy:?} vs {genuine:?}"
        );
    }

    #[test]
    fn padding_makes_every_failure_cost_one_check_of_each_kind() {
        let b8 = Work::Bcrypt(8).decoy();
        let b5 = Work::Bcrypt(5).decoy();
        let kinds = Work::kinds(["{SHA}x", "$apr1$a$b", &b5, &b8, "$1$s$c"].into_iter());
        assert_eq!(kinds, [Work::Bcrypt(8), Work::Md5, Work::Sha1]);
        let works =
            |w: Work| -> Vec<Work> { w.padding(&kinds).iter().map(|h| Work::of(h)).collect() };
        assert_eq!(works(Work::Bcrypt(8)), [Work::Md5, Work::Sha1]);
        assert_eq!(
            works(Work::Bcrypt(5)),
            [
                Work::Bcrypt(5),
                Work::Bcrypt(6),
                Work::Bcrypt(7),
                Work::Md5,
                Work::Sha1
            ]
        );
        assert_eq!(works(Work::Md5), [Work::Bcrypt(8), Work::Sha1]);
        assert_eq!(works(Work::Sha1), [Work::Bcrypt(8), Work::Md5]);
        // A file of one kind and cost pads nothing.
        let one = Work::kinds([b8.as_str(), b8.as_str()].into_iter());
        assert!(Work::Bcrypt(8).padding(&one).is_empty());
        assert!(Work::Bcrypt(12).padding(&one).is_empty());
    }

    #[test]
    fn malformed_hashes_never_verify() {
        for h in [
            "$2y$",
            "$2y$10$short",
            "$apr1$",
            "$apr1$salt",
            "{SHA}",
            "{SHA}!!!",
            "",
            "$1$$",
        ] {
            assert!(!verify(h, b""), "{h}");
            assert!(!verify(h, b"password"), "{h}");
        }
    }
}
