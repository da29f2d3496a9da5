//! jsonwebtoken's crypto over ring: verifying (what the proxy does with access tokens) and
//! signing (what the tests do) every algorithm jsonwebtoken names, and the key facts its JWK
//! code asks for. An algorithm whose key is of another family is refused before any math.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{ErrorKind, Result};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature::{Error as SignatureError, Signer, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use ring::{digest, hmac};

/// The provider [`super::install`] makes jsonwebtoken's process default.
pub(super) static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: signer,
    verifier_factory: verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: rsa_components_of_private_key,
        rsa_pub_components_from_public_key: rsa_components_of_public_key,
        ec_pub_components_from_private_key: ec_components_of_private_key,
        ed_pub_components_from_private_key: ed_component_of_private_key,
        compute_digest,
    },
};

/// A public key (or HMAC secret) checking one algorithm's signatures.
struct RingVerifier {
    algorithm: Algorithm,
    check: Public,
    key: DecodingKey,
}

/// A private key (or HMAC secret) signing with one algorithm.
struct RingSigner {
    algorithm: Algorithm,
    make: Private,
    key: EncodingKey,
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    let check = public_algorithm(*algorithm).ok_or(ErrorKind::InvalidAlgorithm)?;
    Ok(Box::new(RingVerifier { algorithm: *algorithm, check, key: key.clone() }))
}

fn signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    let make = private_algorithm(*algorithm).ok_or(ErrorKind::InvalidAlgorithm)?;
    Ok(Box::new(RingSigner { algorithm: *algorithm, make, key: key.clone() }))
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> std::result::Result<(), SignatureError> {
        let checked = match (&self.check, self.key.kind()) {
            (Public::Hmac(algorithm), DecodingKeyKind::SecretOrDer(secret)) => {
                hmac::verify(&hmac::Key::new(*algorithm, secret), message, signature)
            }
            (Public::Rsa(parameters), DecodingKeyKind::RsaModulusExponent { n, e }) => {
                sig::RsaPublicKeyComponents { n, e }.verify(parameters, message, signature)
            }
            (Public::Rsa(parameters), DecodingKeyKind::SecretOrDer(der)) => {
                sig::UnparsedPublicKey::new(*parameters, der).verify(message, signature)
            }
            (Public::Other(algorithm), DecodingKeyKind::SecretOrDer(bytes)) => {
                sig::UnparsedPublicKey::new(*algorithm, bytes).verify(message, signature)
            }
            _ => return Err(SignatureError::new()),
        };
        checked.map_err(failed)
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

impl Signer<Vec<u8>> for RingSigner {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, SignatureError> {
        let key = self.key.as_bytes();
        let rng = SystemRandom::new();
        match self.make {
            Private::Hmac(algorithm) => Ok(hmac::sign(&hmac::Key::new(algorithm, key), message).as_ref().to_vec()),
            Private::Rsa(padding) => {
                let pair = RsaKeyPair::from_der(key).map_err(failed)?;
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, message, &mut signature).map_err(failed)?;
                Ok(signature)
            }
            Private::Ecdsa(algorithm) => {
                let pair = EcdsaKeyPair::from_pkcs8(algorithm, key, &rng).map_err(failed)?;
                Ok(pair.sign(&rng, message).map_err(failed)?.as_ref().to_vec())
            }
            Private::Ed25519 => {
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(key).map_err(failed)?;
                Ok(pair.sign(message).as_ref().to_vec())
            }
        }
    }
}

impl JwtSigner for RingSigner {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

/// ring's errors say nothing more than "no": neither does a signature's.
fn failed<E>(_: E) -> SignatureError {
    SignatureError::new()
}

/// How a signature of an algorithm is checked.
enum Public {
    Hmac(hmac::Algorithm),
    Rsa(&'static sig::RsaParameters),
    Other(&'static dyn sig::VerificationAlgorithm),
}

/// How a signature of an algorithm is made.
enum Private {
    Hmac(hmac::Algorithm),
    Rsa(&'static dyn sig::RsaEncoding),
    Ecdsa(&'static sig::EcdsaSigningAlgorithm),
    Ed25519,
}

fn public_algorithm(algorithm: Algorithm) -> Option<Public> {
    Some(match algorithm {
        Algorithm::HS256 => Public::Hmac(hmac::HMAC_SHA256),
        Algorithm::HS384 => Public::Hmac(hmac::HMAC_SHA384),
        Algorithm::HS512 => Public::Hmac(hmac::HMAC_SHA512),
        Algorithm::RS256 => Public::Rsa(&sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Public::Rsa(&sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Public::Rsa(&sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Public::Rsa(&sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Public::Rsa(&sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Public::Rsa(&sig::RSA_PSS_2048_8192_SHA512),
        Algorithm::ES256 => Public::Other(&sig::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Public::Other(&sig::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Public::Other(&sig::ED25519),
        _ => return None,
    })
}

fn private_algorithm(algorithm: Algorithm) -> Option<Private> {
    Some(match algorithm {
        Algorithm::HS256 => Private::Hmac(hmac::HMAC_SHA256),
        Algorithm::HS384 => Private::Hmac(hmac::HMAC_SHA384),
        Algorithm::HS512 => Private::Hmac(hmac::HMAC_SHA512),
        Algorithm::RS256 => Private::Rsa(&sig::RSA_PKCS1_SHA256),
        Algorithm::RS384 => Private::Rsa(&sig::RSA_PKCS1_SHA384),
        Algorithm::RS512 => Private::Rsa(&sig::RSA_PKCS1_SHA512),
        Algorithm::PS256 => Private::Rsa(&sig::RSA_PSS_SHA256),
        Algorithm::PS384 => Private::Rsa(&sig::RSA_PSS_SHA384),
        Algorithm::PS512 => Private::Rsa(&sig::RSA_PSS_SHA512),
        Algorithm::ES256 => Private::Ecdsa(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
        Algorithm::ES384 => Private::Ecdsa(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
        Algorithm::EdDSA => Private::Ed25519,
        _ => return None,
    })
}

/// `(n, e)` of an RSA private key (PKCS#1 DER), for its public JWK.
fn rsa_components_of_private_key(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let pair = RsaKeyPair::from_der(der).map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()))?;
    let components = sig::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Ok((components.n, components.e))
}

/// ring reads no bare RSA public key: a JWK is made from the private key or given as `(n, e)`.
fn rsa_components_of_public_key(_der: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    Err(ErrorKind::InvalidRsaKey("an RSA public key's components are read from its JWK".into()).into())
}

/// The curve and `(x, y)` of an EC private key (PKCS#8 DER), for its public JWK.
fn ec_components_of_private_key(der: &[u8], algorithm: Algorithm) -> Result<(EllipticCurve, Vec<u8>, Vec<u8>)> {
    let (signing, curve, coordinate) = match algorithm {
        Algorithm::ES256 => (&sig::ECDSA_P256_SHA256_FIXED_SIGNING, EllipticCurve::P256, 32),
        Algorithm::ES384 => (&sig::ECDSA_P384_SHA384_FIXED_SIGNING, EllipticCurve::P384, 48),
        _ => return Err(ErrorKind::InvalidEcdsaKey.into()),
    };
    let pair = EcdsaKeyPair::from_pkcs8(signing, der, &SystemRandom::new()).map_err(|_| ErrorKind::InvalidEcdsaKey)?;
    match pair.public_key().as_ref() {
        [4, point @ ..] if point.len() == 2 * coordinate => {
            let (x, y) = point.split_at(coordinate);
            Ok((curve, x.to_vec(), y.to_vec()))
        }
        _ => Err(ErrorKind::InvalidEcdsaKey.into()),
    }
}

/// The public `x` of an Ed25519 private key (PKCS#8 DER), for its public JWK.
fn ed_component_of_private_key(der: &[u8], curve: &EllipticCurve) -> Result<Vec<u8>> {
    match curve {
        EllipticCurve::Ed25519 => Ok(Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|_| ErrorKind::InvalidEddsaKey)?
            .public_key()
            .as_ref()
            .to_vec()),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>> {
    let algorithm = match hash {
        ThumbprintHash::SHA256 => &digest::SHA256,
        ThumbprintHash::SHA384 => &digest::SHA384,
        ThumbprintHash::SHA512 => &digest::SHA512,
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(digest::digest(algorithm, data).as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The asymmetric algorithms beside RSA (which tests/fast/jwt.rs signs from PEM files),
    /// signed and verified through jsonwebtoken with keys made here; a changed message fails.
    #[test]
    fn each_asymmetric_algorithm_signs_and_verifies() {
        super::super::install();
        let rng = SystemRandom::new();
        let p256 = EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let p384 = EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P384_SHA384_FIXED_SIGNING, &rng).unwrap();
        let ec_public = |key: &EncodingKey, algorithm| {
            DecodingKey::from_jwk(&jsonwebtoken::jwk::Jwk::from_encoding_key(key, algorithm).unwrap()).unwrap()
        };
        let ed = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let ed_public = Ed25519KeyPair::from_pkcs8(ed.as_ref()).unwrap().public_key().as_ref().to_vec();
        let (es256, es384) = (EncodingKey::from_ec_der(p256.as_ref()), EncodingKey::from_ec_der(p384.as_ref()));
        let cases = [
            (Algorithm::ES256, ec_public(&es256, Algorithm::ES256), es256),
            (Algorithm::ES384, ec_public(&es384, Algorithm::ES384), es384),
            (Algorithm::EdDSA, DecodingKey::from_ed_der(&ed_public), EncodingKey::from_ed_der(ed.as_ref())),
        ];
        for (algorithm, public, private) in cases {
            let signed = jsonwebtoken::crypto::sign(b"header.claims", &private, algorithm).unwrap();
            assert!(
                jsonwebtoken::crypto::verify(&signed, b"header.claims", &public, algorithm).unwrap(),
                "{algorithm:?}"
            );
            assert!(
                !jsonwebtoken::crypto::verify(&signed, b"header.claimz", &public, algorithm).unwrap(),
                "{algorithm:?}"
            );
        }
        let hmac = DecodingKey::from_secret(b"secret").unwrap();
        assert!(
            jsonwebtoken::crypto::verify("AAAA", b"m", &hmac, Algorithm::ES256).is_err(),
            "a key of another family"
        );
    }
}
