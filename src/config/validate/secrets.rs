//! The sections that hold secrets: `[jwt]` (the key `jwt:` parts are verified with) and
//! `[keys]` (the HMAC secret of `hash = true` parts), each read from the environment variable
//! or file the config names, never from the config itself.

use toml::Spanned;

use super::sections::uses_part;

/// The shortest `[keys]` secret accepted without a warning.
const MIN_HASH_SECRET_BYTES: usize = 16;
/// The shortest HS256 secret accepted without a warning: the hash's size (RFC 7518 3.2).
const MIN_HS256_SECRET_BYTES: usize = 32;
use super::{Result, Validator};
use crate::config::raw::{RawConfig, RawJwt};
use crate::config::{
    redact_url, ConfigError, ConfigWarning, HashSecret, JwtConfig, JwtKey, KeyPart, KeysConfig,
};

impl Validator<'_> {
    /// `[jwt]`: required when a route has a `jwt:` key part; otherwise loaded when it can be,
    /// else a warning (its secret's variable unset, say): nothing would verify a token with it.
    pub(super) fn jwt_section(&mut self, raw: &RawConfig) -> Result<Option<JwtConfig>> {
        let Some(j) = &raw.jwt else { return Ok(None) };
        if uses_part(raw, |p| matches!(p, KeyPart::Jwt(_))) {
            let jwt = self.jwt(j)?;
            self.warn_short_jwt_secret(j.get_ref(), &jwt);
            return Ok(Some(jwt));
        }
        match self.jwt(j) {
            Ok(jwt) => {
                self.warn_short_jwt_secret(j.get_ref(), &jwt);
                Ok(Some(jwt))
            }
            Err(ConfigError::Invalid { at, message }) => {
                self.warnings.push(ConfigWarning {
                    at,
                    message: format!("{message}; ignored, since no route has a `jwt:` key part"),
                });
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    fn jwt(&self, raw: &Spanned<RawJwt>) -> Result<JwtConfig> {
        let j = raw.get_ref();
        let key_file = j
            .public_key_file
            .as_ref()
            .map(|f| self.dir.join(f.get_ref()));
        let key = match (&j.hs256_secret_env, &j.public_key_file) {
            (Some(_), Some(f)) => {
                return self.error(
                    f.span(),
                    "jwt: set either hs256_secret_env or public_key_file, not both",
                )
            }
            (None, None) => {
                return self.error(raw.span(), "jwt: needs hs256_secret_env or public_key_file")
            }
            (Some(env), None) => match self.env.get(env.get_ref()).filter(|s| !s.is_empty()) {
                Some(secret) => JwtKey::Hs256(secret.into_bytes()),
                None => {
                    return self.error(
                        env.span(),
                        format!(
                            "jwt.hs256_secret_env: {}",
                            self.unusable_secret(env.get_ref())
                        ),
                    )
                }
            },
            (None, Some(file)) => self.public_key(file)?,
        };
        Ok(JwtConfig {
            key,
            issuer: j.issuer.as_ref().map(|s| s.get_ref().clone()),
            audience: j.audience.as_ref().map(|s| s.get_ref().clone()),
            require_exp: j.require_exp.unwrap_or(false),
            key_file,
            secret_env: j.hs256_secret_env.as_ref().map(|s| s.get_ref().clone()),
        })
    }

    fn public_key(&self, file: &Spanned<String>) -> Result<JwtKey> {
        let path = self.dir.join(file.get_ref());
        let pem = match std::fs::read(&path) {
            Ok(p) => p,
            Err(e) => {
                return self.error(
                    file.span(),
                    format!(
                        "jwt.public_key_file: cannot read `{}`: {e}",
                        redact_url(&path.display().to_string())
                    ),
                )
            }
        };
        if jsonwebtoken::DecodingKey::from_rsa_pem(&pem).is_ok() {
            Ok(JwtKey::Rs256(pem))
        } else if jsonwebtoken::DecodingKey::from_ec_pem(&pem).is_ok() {
            Ok(JwtKey::Es256(pem))
        } else {
            self.error(
                file.span(),
                format!(
                    "jwt.public_key_file: `{}` is not an RSA or EC public key in PEM",
                    redact_url(&path.display().to_string())
                ),
            )
        }
    }

    /// Why the secret in the environment variable `name` cannot be used: it is not set, or
    /// it is set to nothing.
    pub(super) fn unusable_secret(&self, name: &str) -> String {
        let shown = redact_url(name);
        match self.env.get(name) {
            Some(_) => format!("the environment variable `{shown}` is empty"),
            None => format!("the environment variable `{shown}` is not set"),
        }
    }

    /// An HS256 secret shorter than the hash (RFC 7518 3.2 asks for at least 256 bits): the
    /// issuer's tokens could be forged by whoever finds it by trying.
    fn warn_short_jwt_secret(&mut self, raw: &RawJwt, jwt: &JwtConfig) {
        let (JwtKey::Hs256(secret), Some(env)) = (&jwt.key, &raw.hs256_secret_env) else {
            return;
        };
        if secret.len() < MIN_HS256_SECRET_BYTES {
            self.warn(
                env.span(),
                format!(
                    "jwt.hs256_secret_env: the secret in `{}` is {} bytes; HS256 wants at least {MIN_HS256_SECRET_BYTES} (RFC 7518 3.2): a shorter one can be found by trying, and then tokens forged with any claim",
                    env.get_ref(),
                    secret.len()
                ),
            );
        }
    }

    /// `[keys]`: the HMAC secret of `hash = true` key parts, read from the named variable.
    /// Whether a route needs it is checked where a part asks for it; a short one is warned
    /// about.
    pub(super) fn keys_section(&mut self, raw: &RawConfig) -> Result<KeysConfig> {
        let Some(k) = &raw.keys else {
            return Ok(KeysConfig::default());
        };
        let Some(env) = &k.get_ref().hash_secret_env else {
            return Ok(KeysConfig::default());
        };
        if env.get_ref().trim().is_empty() {
            return self.error(
                env.span(),
                "keys.hash_secret_env: must name an environment variable",
            );
        }
        let secret = self
            .env
            .get(env.get_ref())
            .filter(|s| !s.is_empty())
            .map(|s| HashSecret(s.into_bytes()));
        if let Some(HashSecret(bytes)) = &secret {
            if bytes.len() < MIN_HASH_SECRET_BYTES {
                self.warn(
                    env.span(),
                    format!(
                        "keys.hash_secret_env: the secret in `{}` is {} bytes; use at least {MIN_HASH_SECRET_BYTES} random bytes (`openssl rand -hex 32`): hashed key parts are HMACs under it, and whoever finds a short secret by trying can tell which phone number or e-mail each hashed key is",
                        env.get_ref(),
                        bytes.len()
                    ),
                );
            }
        }
        Ok(KeysConfig {
            hash_secret_env: Some(env.get_ref().clone()),
            hash_secret: secret,
        })
    }
}
