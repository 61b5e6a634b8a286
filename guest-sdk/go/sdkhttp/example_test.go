package sdkhttp_test

import (
	"io"
	"net/http"

	sdk "github.com/sandboxd/sandboxd/guest-sdk/go"
	"github.com/sandboxd/sandboxd/guest-sdk/go/sdkhttp"
)

type In struct {
	Message string `json:"message"`
}

type Out struct {
	Echo string `json:"echo"`
}

// README.md's "Outbound HTTP" snippet: a handler whose requests go through
// the host's HTTP import. (Compiled, not run: it would need the network.)
func Example() {
	var client = &http.Client{Transport: sdkhttp.Transport{}}

	status := func(ctx *sdk.Context, in In) (Out, error) {
		resp, err := client.Get("https://api.example.com/v1/status")
		if err != nil {
			return Out{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return Out{Echo: string(b)}, err
	}
	sdk.Handle(status) // in a handler: func init() { sdk.Handle(status) }
}

// A secret the guest may not read travels as a placeholder the host
// replaces for allowlisted destinations only.
func ExampleSecretHeader() {
	req, _ := http.NewRequest("GET", "https://api.example.com/v1/items", nil)
	req.Header.Set("Authorization", "Bearer "+sdkhttp.SecretHeader("API_TOKEN"))
	_, _ = (&http.Client{Transport: sdkhttp.Transport{}}).Do(req)
}
