package routing

import "testing"

func TestTable(t *testing.T) {
	var tb Table[string]
	for _, n := range []string{"A.example.com.", "*.example.com", "*.b.example.com", "*", "c.test"} {
		if !tb.Add(n, n) {
			t.Fatalf("Add(%q) refused", n)
		}
	}
	if tb.Add("a.example.com", "again") || tb.Add("*.EXAMPLE.com", "again") || tb.Add("*", "again") {
		t.Error("a name added twice took the second value")
	}
	for _, tt := range []struct{ name, want string }{
		{"a.example.com", "A.example.com."},
		{"x.example.com", "*.example.com"},
		{"x.b.example.com", "*.b.example.com"}, // the longest wildcard, whatever the order added
		{"b.example.com", "*.example.com"},
		{"example.com", "*"}, // a wildcard needs a label of its own
		{"c.test", "c.test"},
		{"", "*"},
	} {
		if v, ok := tb.Lookup([]byte(tt.name)); !ok || v != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tt.name, v, ok, tt.want)
		}
		if v, ok := tb.LookupString(tt.name); !ok || v != tt.want {
			t.Errorf("LookupString(%q) = %q, %v; want %q", tt.name, v, ok, tt.want)
		}
		if got, want := tb.Names(tt.name), tt.want != "*"; got != want {
			t.Errorf("Names(%q) = %v, want %v", tt.name, got, want)
		}
	}
	var none Table[int]
	if _, ok := none.Lookup([]byte("a")); ok {
		t.Error("an empty table matched")
	}
	none.Add("*.z", 1)
	none.Add("*.y.z", 2)
	if v, _ := none.LookupString("q.y.z"); v != 2 {
		t.Errorf("longer wildcard added second: got %d", v)
	}
	if tb.Len() != 5 {
		t.Errorf("Len %d", tb.Len())
	}
}
