package main

import (
	"errors"
	"testing"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
)

func TestEcho(t *testing.T) {
	tests := []struct{ input, want string }{
		{`{"message":"ab","repeat":3}`, `{"echo":"ababab","length":6}`},
		{`{"message":"héllo"}`, `{"echo":"héllo","length":5}`},
		{`{"message":"","repeat":1}`, `{"echo":"","length":0}`},
	}
	for _, tc := range tests {
		out, err := sdk.Invoke([]byte(tc.input), nil)
		if err != nil || string(out) != tc.want {
			t.Errorf("Invoke(%s) = %s, %v; want %s", tc.input, out, err, tc.want)
		}
	}
}

func TestEchoNegativeRepeat(t *testing.T) {
	_, err := sdk.Invoke([]byte(`{"message":"x","repeat":-1}`), nil)
	var e *sdk.Error
	if !errors.As(err, &e) || e.Code != "invalid-repeat" {
		t.Errorf("err = %v, want an invalid-repeat *sdk.Error", err)
	}
}
