//! A key's family: which algorithms a key may verify (the bearer verifier's and the JWKS's
//! shared vocabulary, so that neither depends on the other).

use jsonwebtoken::Algorithm;

/// A key's kind, and so the algorithms it may verify: an RSA public key is never an HMAC
/// secret (the classic confusion), an EC key never an RSA one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl Family {
    pub fn of(a: Algorithm) -> Family {
        use Algorithm as A;
        match a {
            A::HS256 | A::HS384 | A::HS512 => Family::Hmac,
            A::ES256 | A::ES384 => Family::Ec,
            A::EdDSA => Family::Ed,
            _ => Family::Rsa,
        }
    }
}
