package oauthclient

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestSignAssertion(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8 := func(k any) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	sec1, _ := x509.MarshalECPrivateKey(ec)
	tests := []struct {
		name, key, alg, wantAlg, wantErr string
		verify                           any
	}{
		{name: "EC PKCS#8", key: pkcs8(ec), wantAlg: "ES256", verify: &ec.PublicKey},
		{name: "EC SEC 1", key: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})), wantAlg: "ES256", verify: &ec.PublicKey},
		{name: "RSA PKCS#1", key: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})), wantAlg: "RS256", verify: &rk.PublicKey},
		{name: "RSA as PS256", key: pkcs8(rk), alg: "PS256", wantAlg: "PS256", verify: &rk.PublicKey},
		{name: "Ed25519", key: pkcs8(ed), wantAlg: "EdDSA", verify: ed.Public()},
		{name: "not PEM", key: "-----BEGIN nothing", wantErr: "not PEM"},
		{name: "HMAC refused", key: pkcs8(ec), alg: "HS256", wantErr: "not an asymmetric"},
		{name: "none refused", key: pkcs8(ec), alg: "none", wantErr: "not an asymmetric"},
	}
	now := time.Now()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := signAssertion(tt.key, tt.alg, "client-1", "https://as.example", now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v; want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY") {
					t.Errorf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var claims jwt.RegisteredClaims
			tok, err := jwt.ParseWithClaims(s, &claims, func(*jwt.Token) (any, error) { return tt.verify, nil },
				jwt.WithValidMethods([]string{tt.wantAlg}), jwt.WithAudience("https://as.example"), jwt.WithIssuer("client-1"), jwt.WithSubject("client-1"))
			if err != nil || !tok.Valid {
				t.Fatalf("verify: %v", err)
			}
			if claims.ID == "" || claims.ExpiresAt.Sub(now) > 5*time.Minute {
				t.Errorf("claims %+v: want a jti and a short life", claims)
			}
		})
	}
}
