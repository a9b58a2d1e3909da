//! Assignments gantry can tell from forged ones. Phase 1 of placing a job writes the
//! member's node on the pod (`gantry.dev/assigned-node`) and, beside it, a seal: an
//! HMAC-SHA256 over the pod's uid and the node, keyed by a secret only gantry holds (kept
//! in the Secret `gantry-seal`, `seal_secret.rs`). The queue trusts an assignment only when its
//! seal verifies: one a pod's author wrote (in a namespace the webhooks do not judge, or
//! while they were down) is ignored, so it neither holds room nor is released. A pod's
//! uid is the API server's, so a seal cannot be copied onto another pod.

use base64::Engine as _;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The annotation holding an assignment's seal.
pub use serve::trust::SEAL_ANNOTATION;

/// The key, and its text as kept in its Secret.
#[derive(Clone)]
pub struct Seal {
    key: hmac::Key,
    text: String,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.write_str("Seal(..)")
    }
}

const KEY_BYTES: usize = 32;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

impl Seal {
    /// Whether `other` is the same key (what a view kept from the last cycle checks).
    pub fn same_key(&self, other: &Seal) -> bool {
        self.text == other.text
    }

    /// A new random key.
    pub fn generate() -> Result<Seal, String> {
        let mut raw = [0u8; KEY_BYTES];
        SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| "no randomness for the assignment seal's key".to_string())?;
        Ok(Seal::from_bytes(&raw))
    }

    fn from_bytes(raw: &[u8]) -> Seal {
        Seal {
            key: hmac::Key::new(hmac::HMAC_SHA256, raw),
            text: b64().encode(raw),
        }
    }

    /// The key from its text (as [`Seal::text`] wrote it).
    pub fn from_text(text: &str) -> Result<Seal, String> {
        let raw = b64()
            .decode(text.trim())
            .map_err(|e| format!("the assignment seal's key does not decode: {e}"))?;
        if raw.len() != KEY_BYTES {
            return Err(format!(
                "the assignment seal's key has {} bytes, not {KEY_BYTES}",
                raw.len()
            ));
        }
        Ok(Seal::from_bytes(&raw))
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    fn message(uid: &str, node: &str) -> Vec<u8> {
        let mut m = Vec::with_capacity(uid.len() + node.len() + 1);
        m.extend_from_slice(uid.as_bytes());
        m.push(0);
        m.extend_from_slice(node.as_bytes());
        m
    }

    /// The seal of assigning the pod `uid` to `node`.
    pub fn sign(&self, uid: &str, node: &str) -> String {
        b64().encode(hmac::sign(&self.key, &Self::message(uid, node)).as_ref())
    }

    /// The seal of a mark of `kind` (`nominated`, `preempted`) saying `text` on the pod
    /// `uid`. Distinct from an assignment's seal (node names hold no `:`) and from a mark
    /// of another kind.
    pub fn sign_mark(&self, kind: &str, uid: &str, text: &str) -> String {
        self.sign(uid, &format!("{kind}:{text}"))
    }

    /// Whether `seal` is this key's seal of the mark [`Seal::sign_mark`] made.
    pub fn verify_mark(&self, kind: &str, uid: &str, text: &str, seal: &str) -> bool {
        self.verify(uid, &format!("{kind}:{text}"), seal)
    }

    /// Whether `seal` is this key's seal of assigning `uid` to `node`.
    pub fn verify(&self, uid: &str, node: &str, seal: &str) -> bool {
        let Ok(tag) = b64().decode(seal.trim()) else {
            return false;
        };
        hmac::verify(&self.key, &Self::message(uid, node), &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_binds_the_pod_and_the_node() {
        let seal = Seal::generate().unwrap_or_else(|_| Seal::from_bytes(&[7; KEY_BYTES]));
        let s = seal.sign("uid-1", "n1");
        assert!(seal.verify("uid-1", "n1", &s));
        assert!(!seal.verify("uid-2", "n1", &s), "another pod");
        assert!(!seal.verify("uid-1", "n2", &s), "another node");
        assert!(!seal.verify("uid-1", "n1", "forged"));
        assert!(!seal.verify("uid-1", "n1", ""));
        let other = Seal::from_bytes(&[9; KEY_BYTES]);
        assert!(!other.verify("uid-1", "n1", &s), "another key");
        // The key survives its text.
        let again = Seal::from_text(seal.text());
        assert!(again.is_ok_and(|k| k.verify("uid-1", "n1", &s)));
        assert!(Seal::from_text("short").is_err());
        assert!(!format!("{seal:?}").contains(seal.text()));
    }
}
