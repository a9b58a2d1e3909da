//! Where the seal's key lives: the Secret `gantry-seal` (key `key`) in gantry's namespace,
//! readable only by those an administrator lets read Secrets there (gantry's service
//! account reads this one by name). The first leader makes it; a later replica, or a new
//! leader, reads it. A key an older gantry kept in its memory ConfigMap is moved here (so
//! assignments sealed with it stay trusted) and then dropped from the ConfigMap.
//!
//! The key is never rotated by gantry: deleting the Secret makes the next leader start a
//! new one, after which every pod that was assigned but not yet bound is assigned again.

use crate::seal::Seal;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;

pub const SECRET: &str = "gantry-seal";
pub const SECRET_KEY: &str = "key";

/// What reading the Secret found.
#[derive(Debug)]
pub enum Found {
    Key(Seal),
    /// No Secret, and this replica may not make one (it does not lead).
    Missing,
}

fn unusable(namespace: &str, why: &str) -> String {
    format!(
        "secret {namespace}/{SECRET} holds no usable key under `{SECRET_KEY}` ({why}); delete it and the leader makes a new one (pods assigned but not bound are then assigned again)"
    )
}

/// The key in `secret`, if it holds a usable one.
pub fn key_of(secret: &Secret, namespace: &str) -> Result<Seal, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_KEY))
        .ok_or_else(|| unusable(namespace, "no such key"))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| unusable(namespace, "not text"))?;
    Seal::from_text(text).map_err(|e| unusable(namespace, &e))
}

/// The Secret gantry writes for `seal`.
pub fn secret_for(seal: &Seal, namespace: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(SECRET.into());
    s.metadata.namespace = Some(namespace.into());
    s.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_string(),
            crate::controller::COMPONENT.to_string(),
        )]
        .into(),
    );
    s.type_ = Some("Opaque".into());
    s.immutable = Some(true);
    s.data = Some(
        [(
            SECRET_KEY.to_string(),
            ByteString(seal.text().as_bytes().to_vec()),
        )]
        .into(),
    );
    s
}

/// Reads the key; when there is none and `leading`, makes it (from `legacy`, the key an
/// older gantry kept in its memory, when that one is usable). Two leaders racing both end
/// with the key that was created first.
pub async fn load_or_make(
    client: &Client,
    namespace: &str,
    legacy: Option<&str>,
    leading: bool,
) -> Result<Found, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |e: kube::Error| {
        format!(
            "read secret {namespace}/{SECRET}: {}",
            crate::bounded::brief(&e)
        )
    };
    if let Some(s) = api.get_opt(SECRET).await.map_err(read)? {
        return key_of(&s, namespace).map(Found::Key);
    }
    if !leading {
        return Ok(Found::Missing);
    }
    let seal = match legacy.map(Seal::from_text) {
        Some(Ok(kept)) => kept,
        _ => Seal::generate()?,
    };
    match api
        .create(&PostParams::default(), &secret_for(&seal, namespace))
        .await
    {
        Ok(_) => Ok(Found::Key(seal)),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let s = api.get(SECRET).await.map_err(read)?;
            key_of(&s, namespace).map(Found::Key)
        }
        Err(e) => Err(format!(
            "create secret {namespace}/{SECRET}: {}",
            crate::bounded::brief(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_holds_the_key_it_was_made_from() {
        let made = Seal::from_text("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8");
        assert!(made.is_ok());
        let Ok(seal) = made else { return };
        let back = key_of(&secret_for(&seal, "gantry-system"), "gantry-system");
        assert_eq!(
            back.map(|s| s.text().to_string()).ok(),
            Some(seal.text().to_string())
        );
    }

    #[test]
    fn an_unusable_secret_says_how_to_mend_it() {
        let s = Secret {
            data: Some([(SECRET_KEY.to_string(), ByteString(b"short".to_vec()))].into()),
            ..Secret::default()
        };
        let err = key_of(&s, "gantry-system").err().unwrap_or_default();
        assert!(
            err.contains("gantry-system/gantry-seal") && err.contains("delete it"),
            "{err}"
        );
        let err = key_of(&Secret::default(), "ns").err().unwrap_or_default();
        assert!(err.contains("no such key"), "{err}");
    }
}
