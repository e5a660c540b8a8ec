//! The README's recipes as one test binary, each behind the real proxy or against the real
//! service it names.

#[path = "../support/mod.rs"]
mod support;

mod recipe_check;
mod recipe_envoy;
mod recipe_envoy_ext_authz;
mod recipe_istio;
mod recipe_llm;
mod recipe_login;
mod recipe_login_demo_upstream;
mod recipe_login_spellings;
mod recipe_otp;
mod recipe_otp_spellings;
mod recipe_proxies;
mod recipe_traefik;
