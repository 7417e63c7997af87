package api

import gojson "github.com/goccy/go-json"

// ConvertJSON converts in to out, two types with the same JSON shape (an
// API type and its domain twin), through their JSON. It uses go-json, a
// drop-in for encoding/json, faster on these types, which the api converts
// on every run it creates. Errors: go-json's.
func ConvertJSON(in, out any) error {
	raw, err := gojson.Marshal(in)
	if err != nil {
		return err
	}
	return gojson.Unmarshal(raw, out)
}
