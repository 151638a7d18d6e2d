package gwmode

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		err  string
	}{
		{"shared", Shared, ""},
		{"local", Local, ""},
		{"", "", `gateway mode "" is neither "shared" nor "local"`},
		{"Local", "", `gateway mode "Local" is neither "shared" nor "local"`},
		{" shared", "", `gateway mode " shared" is neither "shared" nor "local"`},
		{"bogus", "", `gateway mode "bogus" is neither "shared" nor "local"`},
	} {
		got, err := Parse(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("Parse(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
