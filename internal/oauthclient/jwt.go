package oauthclient

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// assertionLifetime is how long a client assertion is valid: one token
// request.
const assertionLifetime = 2 * time.Minute

// signAssertion makes a client assertion for private_key_jwt (RFC 7523
// §2.2, RFC 7521 §5.2): issued by and about the client, for the
// authorization server (its issuer identifier, as RFC 7523bis asks), with
// a fresh jti so that it cannot be replayed.
func signAssertion(keyPEM, alg, clientID, audience string, now time.Time) (string, error) {
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return "", err
	}
	method, err := signingMethod(key, alg)
	if err != nil {
		return "", err
	}
	claims := jwt.RegisteredClaims{
		Issuer:    clientID,
		Subject:   clientID,
		Audience:  jwt.ClaimStrings{audience},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-30 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(assertionLifetime)),
		ID:        randomString(),
	}
	return jwt.NewWithClaims(method, claims).SignedString(key)
}

// parsePrivateKey reads a PEM private key: PKCS#8, SEC 1 (EC) or PKCS#1
// (RSA). Errors never quote the key.
func parsePrivateKey(keyPEM string) (crypto.Signer, error) {
	block, _ := pem.Decode([]byte(keyPEM))
	if block == nil {
		return nil, errors.New("private_key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("private_key (PEM %s) is not a PKCS#8, EC or RSA private key", block.Type)
}

// signingMethod is alg, checked against the key, or the key's natural
// algorithm.
func signingMethod(key crypto.Signer, alg string) (jwt.SigningMethod, error) {
	if alg == "" {
		switch k := key.(type) {
		case *ecdsa.PrivateKey:
			switch k.Curve {
			case elliptic.P384():
				alg = "ES384"
			case elliptic.P521():
				alg = "ES512"
			default:
				alg = "ES256"
			}
		case *rsa.PrivateKey:
			alg = "RS256"
		case ed25519.PrivateKey:
			alg = "EdDSA"
		}
	}
	m := jwt.GetSigningMethod(alg)
	if m == nil || alg == "none" || alg[:2] == "HS" {
		return nil, fmt.Errorf("signing algorithm %q is not an asymmetric JWS algorithm", alg)
	}
	return m, nil
}
