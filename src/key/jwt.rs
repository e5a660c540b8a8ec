//! `jwt:CLAIM` key parts: the claim comes from a `Bearer` token whose signature (HS256 secret or
//! RS256/ES256 public key) and, when configured, issuer and audience (which it must then carry)
//! were verified, that carries `exp` when `jwt.require_exp = true`, and is within its `exp` and
//! `nbf`, give or take [`CLOCK_SKEW_SECS`]. A token that fails any check yields no claims: the
//! key part counts as missing.

use http::header::AUTHORIZATION;
use http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::config::{JwtConfig, JwtKey};

/// The clock skew allowed between the token's issuer and the gateway when `exp` and `nbf` are
/// checked, in seconds (Envoy's `jwt_authn` allows the same by default).
pub const CLOCK_SKEW_SECS: u64 = 60;

/// Verifies bearer tokens against the `[jwt]` section.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl JwtVerifier {
    /// Builds the verifier; the config was already checked to hold a usable key.
    pub fn new(config: &JwtConfig) -> Result<JwtVerifier, jsonwebtoken::errors::Error> {
        let (key, alg) = match &config.key {
            JwtKey::Hs256(secret) => (DecodingKey::from_secret(secret), Algorithm::HS256),
            JwtKey::Rs256(pem) => (DecodingKey::from_rsa_pem(pem)?, Algorithm::RS256),
            JwtKey::Es256(pem) => (DecodingKey::from_ec_pem(pem)?, Algorithm::ES256),
        };
        let mut validation = Validation::new(alg);
        validation.required_spec_claims.clear();
        if config.require_exp {
            validation.required_spec_claims.insert("exp".to_string());
        }
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.leeway = CLOCK_SKEW_SECS;
        // A configured issuer or audience is required, not only compared when present: a token
        // that leaves it out was not issued for this gateway (another service's, under a shared
        // secret), as Envoy's `jwt_authn` with `issuer`/`audiences` decides.
        if let Some(iss) = &config.issuer {
            validation.set_issuer(&[iss]);
            validation.required_spec_claims.insert("iss".to_string());
        }
        match &config.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                validation.required_spec_claims.insert("aud".to_string());
            }
            None => validation.validate_aud = false,
        }
        Ok(JwtVerifier { key, validation })
    }

    /// The claims of the request's bearer token, if it verifies.
    pub fn verified_claims(&self, headers: &HeaderMap) -> Option<Map<String, Value>> {
        let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        jsonwebtoken::decode::<Map<String, Value>>(token.trim(), &self.key, &self.validation)
            .ok()
            .map(|data| data.claims)
    }
}

/// A claim as key material: strings as they are, numbers and booleans printed.
pub(super) fn claim_value(claims: &Map<String, Value>, name: &str) -> Option<String> {
    match claims.get(name)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
