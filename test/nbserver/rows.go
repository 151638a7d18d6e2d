package nbserver

import (
	"reflect"

	"github.com/ovn-org/libovsdb/model"
)

// UUIDOf is the UUID of row, a pointer to one of the nbdb models ("" for anything else).
func UUIDOf(row model.Model) string {
	if s, ok := field(row, "UUID").(string); ok {
		return s
	}
	return ""
}

// ExternalIDsOf is the external_ids of row, a pointer to one of the nbdb models (nil for a table without them).
func ExternalIDsOf(row model.Model) map[string]string {
	if m, ok := field(row, "ExternalIDs").(map[string]string); ok {
		return m
	}
	return nil
}

// field is the value of the struct field name of the struct row points to (nil when there is none).
func field(row model.Model, name string) any {
	v := reflect.ValueOf(row)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}
