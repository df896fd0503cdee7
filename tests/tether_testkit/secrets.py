TEST_SECRET = "tether-test-secret-0123456789abcdef-0123456789"
